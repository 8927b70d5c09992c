package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/podnet/nsthread"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
	"istio-cni.local/istio-cni/pkg/wire/lookups"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// The ADD the node agent runs for the plugin's shim (pkg/wire/handoff):
// this package's own ADD, with the agent's informer for the lookup and
// netlink for the rules, so that what a pod gets is decided in one place.
// The agent finishes it or hands it back untouched but for rules the
// plugin reconciles: it logs, records and reports only an ADD it finished.

// errHandBack marks why the agent hands an ADD back to the plugin.
var errHandBack = errors.New("handed back")

func handBack(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errHandBack, fmt.Sprintf(format, a...))
}

// AgentSide is what the node agent lends an ADD it runs.
type AgentSide struct {
	// Lookup is the agent's copy of a pod.
	Lookup lookups.Lookup
	// ReadsBack says whether the audit reads back what ADD writes: the
	// agent runs no iptables-save for an ADD, so without it every ADD is
	// handed back.
	ReadsBack func() bool
	// NodePath maps a path on the node (the entry's records_dir, log_file,
	// reports_socket) to where the agent sees it; false when it does not.
	NodePath func(string) (string, bool)
	Now      func() time.Time
	// Report, when set, takes the reports of ADDs whose entry names the
	// agent's own socket, ReportsSocket (as the agent sees it), in the
	// agent's process: no encoding, no connection, no second goroutine
	// while the shim exits.
	Report        func(reports.Report)
	ReportsSocket string
}

// agentRun is the hand-off an ADD runs in the agent for: the host
// (host.go) that hands back whatever it cannot finish.
type agentRun struct {
	req  handoff.Request
	side AgentSide
	// netlink: the families the shim found nf_tables in, laid out as
	// the node's release writes them.
	netlink map[iptables.Family]nfnl.Layout
	// noLayout says why the shim's families are not written here.
	noLayout string
	// legacy: the families the shim found legacy, written by x_tables
	// replaces from the agent's process (pkg/iptables/legacy).
	legacy map[iptables.Family]bool
	// native: the entry writes native nftables, over netlink whatever
	// the node's iptables (admit sets it).
	native bool
	// logFile is the entry's log_file where the agent sees it: the line
	// goes there only once the ADD is finished.
	logFile string
	// afterReply sends the verb's report.
	afterReply func()
}

// late says whether the shim has stopped waiting: then the plugin runs
// the ADD, and the agent must write nothing more.
func (r *agentRun) late() bool {
	return r.req.Deadline == 0 || r.side.Now().UnixNano() >= r.req.Deadline
}

// RunAdd runs a handed-off ADD in the namespace open at netnsFD. Call
// after, when not nil, once the shim has the answer, and only then.
func (a AgentSide) RunAdd(req handoff.Request, netnsFD int) (resp handoff.Response, after func()) {
	defer func() {
		// A bug in the plugin's code must cost this ADD, not the agent.
		if r := recover(); r != nil {
			resp, after = handoff.Response{HandBack: fmt.Sprintf("the agent's ADD panicked: %v", r)}, nil
		}
	}()
	run := &agentRun{req: req, side: a, netlink: map[iptables.Family]nfnl.Layout{}, legacy: map[iptables.Family]bool{}}
	layout, ok := nfnl.LayoutOf(req.Release)
	if !ok && len(req.Netlink) > 0 {
		run.noLayout = "the agent lays out no rules as iptables " + strconv.Quote(req.Release) + " writes them"
	}
	for _, f := range req.Netlink {
		if fam, known := familyNamed(f); known && ok {
			run.netlink[fam] = layout
		}
	}
	for _, f := range req.Legacy {
		if fam, known := familyNamed(f); known {
			run.legacy[fam] = true
		}
	}
	args := &skel.CmdArgs{ContainerID: req.ContainerID, IfName: req.IfName, Args: req.Args, Path: req.Path, StdinData: req.Stdin,
		// The descriptor, not the node's path: the agent's container
		// may not see that path, and it names what the runtime opened.
		Netns: fmt.Sprintf("/proc/self/fd/%d", netnsFD)}
	if err := skelChecks(args, req.Netns, netnsFD); err != nil {
		return handoff.Response{HandBack: reason(err)}, nil
	}
	if a.ReadsBack == nil || !a.ReadsBack() {
		return handoff.Response{HandBack: "the agent's audit does not read rules back"}, nil
	}
	if run.late() {
		return handoff.Response{HandBack: "the shim stopped waiting, or gave no deadline"}, nil
	}
	var stdout, stderr bytes.Buffer
	p := NewWithDeps(Deps{
		AskAgent: func(_, namespace, name string) (lookups.Answer, error) {
			pod, ok := a.Lookup(namespace, name)
			if !ok {
				return lookups.Answer{}, lookups.ErrNotHeld
			}
			return lookups.Answer{Pod: pod, ReadsBack: true}, nil
		},
		NewPodGetter: func(*Config) (PodGetter, error) {
			return nil, handBack("the agent does not hold the pod")
		},
		NewPodNetwork: podNetwork,
		Stdout:        &stdout,
		Stderr:        &stderr,
		Now:           a.Now,
	})
	if err := p.add(args, run); err != nil {
		return handoff.Response{HandBack: reason(err)}, nil
	}
	line := stderr.Bytes()
	// The log line and the report are for an ADD the shim got: one it
	// gave up on is the plugin's to log and report.
	return handoff.Response{Done: true, Stdout: stdout.Bytes(), Stderr: line}, func() {
		if run.logFile != "" {
			if f, err := openLogFile(run.logFile, MaxLogFileSize); err == nil {
				_, _ = f.Write(line)
				_ = f.Close()
			}
		}
		run.afterReply()
	}
}

// reason is a hand-back's why, on one line.
func reason(err error) string {
	return strings.ReplaceAll(strings.ReplaceAll(err.Error(), errHandBack.Error()+": ", ""), "\n", "; ")
}

// skelChecks are skel's checks of an ADD's environment: the plugin binary,
// run through skel, reports any failure with skel's own error. Those of
// the config are skelConfChecks, on the config ADD parses.
func skelChecks(args *skel.CmdArgs, netns string, netnsFD int) error {
	if netns == "" || args.Path == "" || utils.ValidateContainerID(args.ContainerID) != nil || utils.ValidateInterfaceName(args.IfName) != nil {
		return handBack("CNI_NETNS, CNI_PATH, CNI_CONTAINERID or CNI_IFNAME is missing or invalid")
	}
	// skel refuses the plugin's own namespace (the host's, for the agent):
	// the agent's, as opened at its start (/proc/self follows the main
	// thread, wherever it was left).
	own, err := nsthread.HomeInode()
	var pod unix.Stat_t
	if err != nil || unix.Fstat(netnsFD, &pod) != nil || pod.Ino == own {
		return handBack("CNI_NETNS is the node's own network namespace, or unreadable")
	}
	return nil
}

// skelConfChecks are skel's checks of the config's name and cniVersion.
func skelConfChecks(conf *Config) error {
	if conf.Name == "" || utils.ValidateNetworkName(conf.Name) != nil {
		return handBack("the config's name is missing or invalid")
	}
	v := conf.CNIVersion
	if v == "" {
		v = "0.1.0" // as version.ConfigDecoder reads it
	}
	if (&version.Reconciler{}).Check(v, version.All) != nil {
		return handBack("the config's cniVersion is not one the plugin supports")
	}
	return nil
}

// admit fits a parsed entry to the agent: its paths to where the agent
// sees them, and its rules to netlink in the families the shim found
// nf_tables on the node.
func (r *agentRun) admit(conf *Config) error {
	if err := skelConfChecks(conf); err != nil {
		return err
	}
	for _, p := range []*string{&conf.RecordsDir, &conf.LogFile, &conf.ReportsSocket} {
		if *p == "" {
			continue
		}
		mapped, ok := r.side.NodePath(*p)
		if !ok {
			return handBack("the agent does not see %s", *p)
		}
		*p = mapped
	}
	// The line goes to the log file once the ADD is finished (RunAdd).
	r.logFile, conf.LogFile = conf.LogFile, ""
	switch {
	case conf.parsed.Native:
		// Native nftables goes over netlink from here as from the
		// plugin: the node's iptables plays no part.
		r.native = true
		return nil
	case len(r.legacy) > 0 && len(r.netlink) > 0:
		return handBack("the node's families are on two backends")
	case len(r.legacy) > 0:
		// The shim resolved the entry's backend on the node: legacy.
		conf.parsed.Backend = release.Legacy
		return nil
	case r.noLayout != "":
		return handBack("%s", r.noLayout)
	case len(r.netlink) == 0:
		return handBack("the node's iptables is not nf_tables %s", "at a release the agent lays out")
	}
	// The shim resolved the entry's backend on the node: nf_tables.
	conf.parsed.Backend = release.NFT
	return nil
}

// familyNamed is the family a hand-off names.
func familyNamed(name string) (iptables.Family, bool) {
	switch name {
	case iptables.IPv4.String():
		return iptables.IPv4, true
	case iptables.IPv6.String():
		return iptables.IPv6, true
	}
	return 0, false
}

// handBack makes any ADD error in the agent a hand-back: the agent never
// fails a pod the plugin might set up.
func (r *agentRun) handBack(err error) error {
	if err == nil || errors.Is(err, errHandBack) {
		return err
	}
	return fmt.Errorf("%w: %w", errHandBack, err)
}

// write is the agent's own only: netlink in the families the shim found
// nf_tables in, x_tables replaces where it found legacy; trusted either
// way: the agent runs no iptables-restore or iptables-save for an ADD, so
// one that must (a repeated ADD, a table found not fresh, a pod in its own
// user namespace, any refusal) is the plugin's.
func (r *agentRun) write(_ *Config, _ plan, trusted bool) (xtables.Write, error) {
	if !trusted {
		return xtables.Write{}, handBack("a repeated ADD reads its rules back")
	}
	deadline := time.Unix(0, r.req.Deadline)
	if r.native {
		return xtables.Write{Only: true, Trusted: true, Deadline: deadline}, nil
	}
	if len(r.legacy) > 0 {
		// Legacy: x_tables replaces, started only before the
		// deadline; a refusal hands the ADD back.
		return xtables.Write{Legacy: r.legacy, Only: true, Trusted: true, Deadline: deadline}, nil
	}
	return xtables.Write{Netlink: r.netlink, Only: true, Trusted: true, Deadline: deadline}, nil
}

// deliver sends the report once the shim has its answer (RunAdd's after).
func (r *agentRun) deliver(send func()) { r.afterReply = send }

// sendReport hands the report of an ADD whose entry names the agent's own
// socket to the agent's handler, in its process.
func (r *agentRun) sendReport(conf *Config, ev reports.Report) error {
	if r.side.Report != nil && conf.ReportsSocket == r.side.ReportsSocket {
		r.side.Report(ev)
		return nil
	}
	return inPlugin{}.sendReport(conf, ev)
}

// netns is the node's path: args.Netns is the agent's descriptor.
func (r *agentRun) netns(*skel.CmdArgs) string { return r.req.Netns }

func (r *agentRun) name() string { return "agent" }

// mayWrite hands back an ADD the agent cannot finish before it writes
// anything: a family the shim did not find nf_tables in (else one
// family's rules would be left for the plugin), or a shim that stopped
// waiting. It is the last step before the write, whose batches check the
// deadline again (xtables.Write.Deadline).
func (r *agentRun) mayWrite(pl plan) error {
	for f, wanted := range map[iptables.Family]bool{iptables.IPv4: pl.v4, iptables.IPv6: pl.v6} {
		if _, ok := r.netlink[f]; wanted && !ok && !r.legacy[f] && !r.native {
			return handBack("the node's %s is neither legacy nor nf_tables at a release the agent lays out", f)
		}
	}
	if r.late() {
		return handBack("the shim stopped waiting")
	}
	return nil
}
