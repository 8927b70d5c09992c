package plugin

import (
	"os"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/applied"
)

// record stores what ADD programmed (records_dir), for the node audit.
// Without a record the audit checks the pod against its annotations as
// they are then, which is what ADD used, so a failed write costs nothing
// but that guard against later edits: it is logged, ADD stands.
func (p *Plugin) record(conf *Config, args *skel.CmdArgs, out *outcome, pl plan) {
	if conf.RecordsDir == "" || out.podUID == "" {
		return
	}
	backend, err := conf.parsed.Backend.Resolve()
	if err != nil {
		backend = "" // the agent then uses the node's
	}
	r := applied.Record{PodUID: out.podUID, Pod: out.pod, Container: args.ContainerID,
		NetnsInode: netnsInode(args.Netns), Spec: pl.spec, IPv4: pl.v4, IPv6: pl.v6, Backend: backend, At: p.deps.Now()}
	if err := (applied.Store{Dir: conf.RecordsDir}).Write(r); err != nil {
		out.warnings = append(out.warnings, "recording the applied rules: "+err.Error())
	}
}

// recordPassed records that ADD left this sandbox without rules: it ties
// the namespace to its pod, so the audit never programs it for another.
func (p *Plugin) recordPassed(conf *Config, args *skel.CmdArgs, out *outcome) {
	if conf.RecordsDir == "" || out.podUID == "" || args.Netns == "" {
		return
	}
	r := applied.Record{PodUID: out.podUID, Pod: out.pod, Container: args.ContainerID,
		NetnsInode: netnsInode(args.Netns), Passed: true, At: p.deps.Now()}
	if err := (applied.Store{Dir: conf.RecordsDir}).Write(r); err != nil {
		out.warnings = append(out.warnings, "recording the sandbox: "+err.Error())
	}
}

// recorded returns the record of this sandbox, if ADD left one.
func recorded(conf *Config, args *skel.CmdArgs, podUID string) (applied.Record, bool) {
	if conf.RecordsDir == "" || podUID == "" {
		return applied.Record{}, false
	}
	recs, err := (applied.Store{Dir: conf.RecordsDir}).ForPod(podUID)
	if err != nil {
		return applied.Record{}, false
	}
	for _, r := range recs {
		if r.Container == args.ContainerID {
			return r, true
		}
	}
	return applied.Record{}, false
}

// netnsInode identifies the namespace; 0 when it cannot be read.
func netnsInode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
