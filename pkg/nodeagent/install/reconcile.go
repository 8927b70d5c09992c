package install

import (
	"bytes"
	"fmt"

	"istio-cni.local/istio-cni/pkg/chain"
)

// Files the installer writes, as metric labels.
const (
	fileBinary     = "binary"
	fileKubeconfig = "kubeconfig"
	fileConflist   = "conflist"
)

// Why a file was written, the "reason" label of the writes metric.
const (
	writeInstall   = "install"   // first write by this process
	writeUpdate    = "update"    // new content: the primary changed, the token rotated
	writeRepair    = "repair"    // someone else changed or removed our file
	writePreempted = "preempted" // renamed to sort before a foreign config again
)

// outcome is what one step did.
type outcome struct {
	why     string // one of write*, "" when nothing was written
	problem error
	// foreign is the config that had come to sort before ours, when
	// why is writePreempted.
	foreign string
}

// reconcile makes the node hold the binary, the kubeconfig and the chained
// conflist, then recomputes readiness. A trigger about one file checks only
// that file (the watches report any change to the others); every step is
// content-guarded, so a reconcile that finds its file in place writes
// nothing.
func (in *Installer) reconcile(t trigger) {
	if in.holding() {
		return
	}
	// The config directory, read once: every decision below is taken
	// from this one view of it.
	cd, readErr := ReadConfDir(in.cfg.CNINetDir)
	if readErr == nil {
		in.noticeOtherInstaller(cd)
	}
	var wrote []string
	failed := ""
	var fight *Fight
	now := in.now() // the pace counts from when repairs happen, not from the events
	for _, st := range in.steps(cd, readErr) {
		// A step that failed last time runs again on any trigger: the
		// conflist waits for the binaries, whatever event brings them.
		if !t.concerns(st.file) && in.files.problems[st.file] == nil {
			continue
		}
		o := in.run(st.file, st.run)
		if o.problem != nil && failed == "" {
			failed = installFailure[st.file]
		}
		if o.why != "" {
			wrote = append(wrote, st.file+":"+o.why)
		}
		switch o.why {
		case writeRepair:
			fight = in.fights.repaired(now, t.file, t.writerOr("changed or removed by another process"))
		case writePreempted:
			fight = in.fights.repaired(now, o.foreign, "sorts before our "+in.files.owned+"; another installer writes it")
		}
	}
	in.report(t, wrote, failed)
	if fight != nil {
		in.startFight(*fight)
	}
	in.updateReadiness()
}

// step keeps one file in place.
type step struct {
	file string
	run  func() outcome
}

// steps are a reconcile's, in order, deciding from cd, the config
// directory as the reconcile read it.
func (in *Installer) steps(cd chain.Dir, readErr error) []step {
	return []step{{fileBinary, in.installBinary}, {fileKubeconfig, in.installKubeconfig}, {fileConflist, func() outcome {
		if readErr != nil {
			return outcome{problem: readErr}
		}
		// A config that chains a plugin the node does not have fails
		// every pod start there, plain ones included.
		if err := in.binariesInPlace(); err != nil {
			return outcome{problem: err}
		}
		return in.installConflist(cd)
	}}}
}

// report counts a reconcile that wrote or failed, and logs what it wrote.
func (in *Installer) report(t trigger, wrote []string, failed string) {
	switch {
	case failed != "":
		in.metrics.Installs.WithLabelValues(failed).Inc()
	case len(wrote) > 0:
		in.metrics.Installs.WithLabelValues(InstallSuccess).Inc()
	}
	if len(wrote) == 0 {
		return
	}
	d := in.now().Sub(t.at)
	if t.reason != reasonInstall {
		in.metrics.RepairSeconds.Observe(d.Seconds())
	}
	in.log.Info("installed", "wrote", wrote, "reason", t.reason, "file", t.file,
		"conflist", in.files.owned, "primary", in.files.primary, "ms", float64(d.Microseconds())/1000)
}

// installFailure names a failing step as upstream's installs_total does.
var installFailure = map[string]string{
	fileBinary: InstallBinaryFailure, fileKubeconfig: InstallKubeconfigFailure, fileConflist: InstallConfigFailure,
}

// run runs one step and records its problem and write.
func (in *Installer) run(file string, step func() outcome) outcome {
	o := step()
	if in.files.problems == nil {
		in.files.problems = map[string]error{}
	}
	in.files.problems[file] = nil
	if o.problem != nil {
		in.files.problems[file] = fmt.Errorf("%s: %w", file, o.problem)
	}
	if o.why != "" {
		in.metrics.Writes.WithLabelValues(file, o.why).Inc()
	}
	return o
}

// classifyWrite names why a write happened: data is what was written, last
// what this process wrote before (nil: nothing yet). Writing what we had
// written already means someone else had changed or removed it.
func classifyWrite(changed bool, data, last []byte) string {
	switch {
	case !changed:
		return ""
	case last == nil:
		return writeInstall
	case bytes.Equal(data, last):
		return writeRepair
	}
	return writeUpdate
}
