package plugin

import (
	"fmt"
	"os"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/applied"
)

// record stores what ADD programmed (records_dir), for the node audit.
// Without a record the audit checks the pod against its annotations as
// they are then, which is what ADD used, so a failed write costs nothing
// but that guard against later edits: it is logged, ADD stands.
//
// It is staged (encoded, written under a temp name) on another goroutine
// while the rules go in, from the moment they are planned, and put in
// place, a rename, once they are in: ADD does not wait for the write.
type record struct {
	done   chan struct{}
	staged *applied.Staged
	err    error
}

// stageRecord starts staging the record of the planned rules; nil when
// ADD keeps none. Call commit or discard on what it returns, exactly once.
func (p *Plugin) stageRecord(conf *Config, args *skel.CmdArgs, out *outcome, pl plan) *record {
	if conf.RecordsDir == "" || out.podUID == "" {
		return nil
	}
	r := applied.Record{PodUID: out.podUID, Pod: out.pod, Container: args.ContainerID,
		Spec: pl.spec, IPv4: pl.v4, IPv6: pl.v6, Native: conf.parsed.Native, At: p.deps.Now()}
	store, backend, netns := applied.Store{Dir: conf.RecordsDir}, conf.parsed.Backend, args.Netns
	rec := &record{done: make(chan struct{})}
	go func() {
		defer close(rec.done)
		// A bug here must cost this record, not the node agent: RunAdd's
		// recover does not reach this goroutine.
		defer func() {
			if p := recover(); p != nil {
				rec.staged, rec.err = nil, fmt.Errorf("staging the record panicked: %v", p)
			}
		}()
		r.NetnsInode = netnsInode(netns)
		if r.Native {
			rec.staged, rec.err = store.Stage(r)
			return
		}
		if r.Backend, rec.err = backend.Resolve(false); rec.err != nil {
			r.Backend = "" // the agent then uses the node's
		}
		// ip6tables can lead elsewhere than iptables (a separate
		// alternative): ADD wrote IPv6 where it leads.
		if r.IPv6 && r.Backend != "" {
			if b6, err := backend.Resolve(true); err == nil && b6 != r.Backend {
				r.BackendIPv6 = b6
			}
		}
		rec.staged, rec.err = store.Stage(r)
	}()
	return rec
}

// commit puts the staged record in place, and says whether it did.
func (rec *record) commit(out *outcome) bool {
	if rec == nil {
		return false
	}
	<-rec.done
	err := rec.err
	if err == nil {
		err = rec.staged.Commit()
	}
	if err != nil {
		out.warnings = append(out.warnings, "recording the applied rules: "+err.Error())
		return false
	}
	return true
}

// discard removes the staged record: the rules did not go in.
func (rec *record) discard() {
	if rec == nil {
		return
	}
	<-rec.done
	if rec.err == nil {
		rec.staged.Discard()
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
