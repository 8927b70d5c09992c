package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/fsutil"
	"istio-cni.local/istio-cni/pkg/kubeconfig"
)

// trigger is why a reconcile runs.
type trigger struct {
	reason string    // "install" at start-up, else what changed
	file   string    // the file whose change was noticed, if any
	at     time.Time // when it was noticed
	// also holds the reasons of the other events of the same burst.
	also []string
}

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
}

// reconcile makes the node hold the binary, the kubeconfig and the chained
// conflist, then recomputes readiness. A trigger about one file checks only
// that file (the watches report any change to the others); every step is
// content-guarded, so a reconcile that finds its file in place writes
// nothing.
func (in *Installer) reconcile(t trigger) {
	if in.conflict != "" {
		in.setReady(false, in.conflict)
		return
	}
	var wrote, fights []string
	for _, s := range []struct {
		file string
		run  func() outcome
	}{{fileBinary, in.installBinary}, {fileKubeconfig, in.installKubeconfig}, {fileConflist, in.installConflist}} {
		if !t.concerns(s.file) {
			continue
		}
		o := in.run(s.file, s.run)
		if o.why != "" {
			wrote = append(wrote, s.file+":"+o.why)
		}
		if o.why == writeRepair || o.why == writePreempted {
			fights = append(fights, s.file)
		}
	}
	if len(wrote) > 0 {
		d := in.now().Sub(t.at)
		if t.reason != reasonInstall {
			in.metrics.RepairSeconds.Observe(d.Seconds())
		}
		in.log.Info("installed", "wrote", wrote, "reason", t.reason, "file", t.file,
			"conflist", in.owned, "primary", in.primary, "ms", float64(d.Microseconds())/1000)
	}
	if len(fights) > 0 && in.countFight(t) {
		in.setReady(false, in.conflict)
		return
	}
	in.updateReadiness()
}

// run runs one step and records its problem and write.
func (in *Installer) run(file string, step func() outcome) outcome {
	o := step()
	if in.problems == nil {
		in.problems = map[string]error{}
	}
	in.problems[file] = nil
	if o.problem != nil {
		in.problems[file] = fmt.Errorf("%s: %w", file, o.problem)
	}
	if o.why != "" {
		in.metrics.Writes.WithLabelValues(file, o.why).Inc()
	}
	return o
}

// concerns reports whether the trigger (or another event of its burst) may
// have changed what file needs.
func (t trigger) concerns(file string) bool {
	for _, reason := range append([]string{t.reason}, t.also...) {
		if concerns(reason, file) {
			return true
		}
	}
	return false
}

func concerns(reason, file string) bool {
	switch reason {
	case reasonBinary:
		return file == fileBinary
	case reasonKubeconfig, reasonToken, reasonPluginToken:
		return file == fileKubeconfig
	case reasonConflistChanged, reasonConflistDeleted, reasonConfigChanged, reasonConfigRemoved:
		return file == fileConflist
	}
	return true // install, re-armed watches, lost events, end of a conflict
}

// Trigger reasons.
const (
	reasonInstall         = "install"
	reasonBinary          = "binary_changed"
	reasonKubeconfig      = "kubeconfig_changed"
	reasonToken           = "token_rotated"
	reasonPluginToken     = "plugin_token_refresh" // #nosec G101 -- a trigger name, not a credential
	reasonConflistChanged = "conflist_changed"
	reasonConflistDeleted = "conflist_deleted"
	reasonConfigChanged   = "config_changed"
	reasonConfigRemoved   = "config_removed"
)

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

func (in *Installer) installBinary() outcome {
	changed, err := inDir(in.cfg.CNIBinDir, 0o755, func(d *fsutil.Dir) (bool, error) {
		return d.CopyFile(PluginBinary, filepath.Join(in.cfg.PluginSource, PluginBinary), 0o755)
	})
	// The image's binary never changes: after the first copy, any copy
	// repairs someone else's change.
	why := ""
	switch {
	case !changed:
	case in.binaryInstalled:
		why = writeRepair
	default:
		why = writeInstall
	}
	in.binaryInstalled = in.binaryInstalled || err == nil
	return outcome{why: why, problem: err}
}

func (in *Installer) installKubeconfig() outcome {
	src, err := kubeconfig.FromServiceAccount(in.cfg.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST", in.cfg.APIHost, "KUBERNETES_SERVICE_PORT", in.cfg.APIPort)
	if err != nil {
		return outcome{problem: err}
	}
	if in.mint != nil {
		// Without a valid minted token the file keeps the last one.
		if src.Token, err = in.pluginToken(); err != nil {
			return outcome{problem: err}
		}
	}
	data, err := kubeconfig.Build(src)
	if err != nil {
		return outcome{problem: err}
	}
	changed, err := inDir(in.cfg.KubeconfigDir, 0o700, func(d *fsutil.Dir) (bool, error) {
		return d.WriteFile(KubeconfigName, data, 0o600)
	})
	why := classifyWrite(changed, data, in.lastKubeconfig)
	if err == nil {
		in.lastKubeconfig = data
	}
	return outcome{why: why, problem: err}
}

// updateReadiness: ready only while no step failed, every watch is armed,
// and the runtime's pick (the first config file) is our chained conflist.
func (in *Installer) updateReadiness() {
	var problems []error
	for _, file := range []string{fileBinary, fileKubeconfig, fileConflist} {
		problems = append(problems, in.problems[file])
	}
	switch err := errors.Join(problems...); {
	case err != nil:
		in.setReady(false, err.Error())
	case len(in.unwatched) > 0:
		in.setReady(false, "not watching "+in.unwatched[0]+" (waiting for it to exist)")
	default:
		if err := in.verifyFirst(); err != nil {
			in.setReady(false, err.Error())
			return
		}
		in.setReady(true, "")
	}
}

// verifyFirst checks that the runtime would pick our conflist, the
// lexically first CNI config file (containerd stops at the first file even
// when it is invalid, so "first valid" is not enough), and that it is
// exactly what the current primary calls for.
func (in *Installer) verifyFirst() error {
	files, err := chain.ConfigFiles(in.cfg.CNINetDir)
	if err != nil {
		return err
	}
	if !slices.Contains(files, in.owned) {
		in.metrics.Preempted.Set(0)
		return fmt.Errorf("our conflist %q is missing", in.owned)
	}
	if files[0] != in.owned {
		in.metrics.Preempted.Set(1)
		return fmt.Errorf("%s sorts before our %s", files[0], in.owned)
	}
	in.metrics.Preempted.Set(0)
	data, err := os.ReadFile(filepath.Join(in.cfg.CNINetDir, in.owned))
	if err != nil {
		return err
	}
	if in.cfg.Mode == Inplace {
		// The primary is the file itself, our entry inside it.
		return chain.Verify(data, &chain.Primary{Name: in.owned, Data: data}, in.entry())
	}
	p, err := chain.FindPrimary(in.cfg.CNINetDir, in.cfg.OwnedConfigName, in.ownedNames()...)
	if err != nil {
		return err
	}
	return chain.Verify(data, p, in.entry())
}

// countFight records a repair of our own files or a preemption; too many
// within the window mean another writer is fighting us, and we stop.
// It reports whether we just stopped.
func (in *Installer) countFight(t trigger) bool {
	cutoff := t.at.Add(-in.cfg.ConflictWindow)
	in.repairs = slices.DeleteFunc(append(in.repairs, t.at), func(at time.Time) bool { return at.Before(cutoff) })
	if len(in.repairs) < in.cfg.ConflictRepairs {
		return false
	}
	what := fmt.Sprintf("another writer keeps undoing %s: %d repairs in %s", t.file, len(in.repairs), in.cfg.ConflictWindow)
	if t.reason == reasonConfigChanged {
		what = fmt.Sprintf("%s keeps sorting before our conflist: %d takeovers in %s", t.file, len(in.repairs), in.cfg.ConflictWindow)
	}
	in.conflict = "conflict: " + what + "; stopped fighting"
	in.metrics.Conflict.Set(1)
	in.log.Error("conflict with another writer; stopped repairing until it stops", "detail", what,
		"conflist", in.owned, "primary", in.primary)
	return true
}
