package install

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/kubeconfig"
)

// trigger is why a reconcile runs.
type trigger struct {
	reason string    // "install" at start-up, else what changed
	file   string    // the file whose change was noticed, if any
	at     time.Time // when it was noticed
	// also holds the reasons of the other events of the same burst.
	also []string
	// writer is what the event tells of whoever changed our file.
	writer string
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
	if in.yieldToOtherInstaller(cd) {
		return
	}
	var wrote []string
	failed := ""
	var fight *Fight
	now := in.now() // the pace counts from when repairs happen, not from the events
	for _, st := range []struct {
		file string
		run  func() outcome
	}{{fileBinary, in.installBinary}, {fileKubeconfig, in.installKubeconfig}, {fileConflist, func() outcome {
		if readErr != nil {
			return outcome{problem: readErr}
		}
		// A config that chains a plugin the node does not have fails
		// every pod start there, plain ones included.
		if err := in.binariesInPlace(); err != nil {
			return outcome{problem: err}
		}
		return in.installConflist(cd)
	}}} {
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
	switch {
	case failed != "":
		in.metrics.Installs.WithLabelValues(failed).Inc()
	case len(wrote) > 0:
		in.metrics.Installs.WithLabelValues(InstallSuccess).Inc()
	}
	if len(wrote) > 0 {
		d := in.now().Sub(t.at)
		if t.reason != reasonInstall {
			in.metrics.RepairSeconds.Observe(d.Seconds())
		}
		in.log.Info("installed", "wrote", wrote, "reason", t.reason, "file", t.file,
			"conflist", in.files.owned, "primary", in.files.primary, "ms", float64(d.Microseconds())/1000)
	}
	if fight != nil {
		in.startFight(*fight)
	}
	in.updateReadiness()
}

// installFailure names a failing step as upstream's installs_total does.
var installFailure = map[string]string{
	fileBinary: InstallBinaryFailure, fileKubeconfig: InstallKubeconfigFailure, fileConflist: InstallConfigFailure,
}

// OtherInstallerReason starts the not-ready reason while another istio-cni
// installer (upstream Istio's) manages the node: no failure of this one,
// so it never taints the node.
const OtherInstallerReason = "another istio-cni installer manages this node"

// yieldToOtherInstaller reports whether upstream Istio's installer manages
// istio-cni here (its entry is in a config): then nothing is written, the
// agent is not ready, and it says so once, until that entry is gone.
func (in *Installer) yieldToOtherInstaller(cd chain.Dir) bool {
	file := otherInstaller(cd)
	was := in.files.other
	in.files.other = file
	switch {
	case file == "" && was != "":
		in.log.Info("the other istio-cni installer's entry is gone; installing", "was", was)
		return false
	case file == "":
		return false
	case was != file:
		in.log.Error(OtherInstallerReason+": not installing, not repairing",
			"file", filepath.Join(in.cfg.CNINetDir, file), "installer", "upstream Istio istio-cni (its entry carries cni_agent_run_dir or kubernetes)",
			"migrate", "uninstall it (helm uninstall istio-cni, or istioctl with components.cni.enabled=false); this agent installs once its entry is gone")
		if in.deps.Notify != nil {
			in.deps.Notify.OtherInstaller(file)
		}
	}
	in.setReady(false, fmt.Sprintf("%s (upstream Istio's entry in %s): uninstall it to migrate", OtherInstallerReason, file))
	return true
}

// startFight reports a fight: the log, the metric, not ready (so the
// node's startup taint comes back), and an Event on the Node.
func (in *Installer) startFight(f Fight) {
	in.metrics.Conflict.Set(1)
	in.log.Error("conflict: another writer keeps undoing our files; repairing at most once a second until it stops",
		"file", f.File, "writer", f.Writer, "repairs", f.Repairs, "window", f.Window.String(),
		"conflist", in.files.owned, "primary", in.files.primary)
	if in.deps.Notify != nil {
		in.deps.Notify.Fighting(f)
	}
}

// endFight: no repair was forced for a whole window.
func (in *Installer) endFight() {
	f := in.fights.end()
	in.metrics.Conflict.Set(0)
	in.log.Info("conflict over: no repair forced for a whole window", "file", f.File, "writer", f.Writer, "window", f.Window.String())
	if in.deps.Notify != nil {
		in.deps.Notify.Calm(f)
	}
	in.updateReadiness()
}

func (t trigger) writerOr(def string) string {
	if t.writer != "" {
		return t.writer
	}
	return def
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
	return true // install, re-armed watches, lost events
}

// paced reports whether a fight may hold this trigger back: a change to
// our own files, or to a config that is not the primary (one that may sort
// before ours). The primary's own changes, token rotations and start-up
// are followed at once.
func (t trigger) paced(primary string) bool {
	for _, reason := range append([]string{t.reason}, t.also...) {
		switch reason {
		case reasonBinary, reasonKubeconfig, reasonConflistChanged, reasonConflistDeleted:
		case reasonConfigChanged, reasonConfigRemoved:
			if t.file == primary {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// merge folds a held trigger into a later one: one reconcile covers both.
func (t trigger) merge(held *trigger) trigger {
	if held == nil {
		return t
	}
	t.also = append(append(t.also, held.reason), held.also...)
	if t.writer == "" {
		t.writer = held.writer
	}
	if held.at.Before(t.at) {
		t.at = held.at // repair time counts from the first change noticed
	}
	return t
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
	changed, err := inDir(in.cfg.CNIBinDir, 0o755, func(d *hostfs.Dir) (bool, error) {
		changed := false
		for _, name := range PluginBinaries {
			c, err := d.CopyFile(name, filepath.Join(in.cfg.PluginSource, name), 0o755)
			if err != nil {
				return changed, fmt.Errorf("%w (--plugin-source/PLUGIN_SOURCE %s must hold %s)", err, in.cfg.PluginSource, strings.Join(PluginBinaries, ", "))
			}
			changed = changed || c
		}
		return changed, nil
	})
	// The image's binary never changes: after the first copy, any copy
	// repairs someone else's change.
	why := ""
	switch {
	case !changed:
	case in.files.binaryInstalled:
		why = writeRepair
	default:
		why = writeInstall
	}
	in.files.binaryInstalled = in.files.binaryInstalled || err == nil
	return outcome{why: why, problem: err}
}

// binariesInPlace says whether CNIBinDir holds every plugin binary, as
// regular files: the conflist is written only then.
func (in *Installer) binariesInPlace() error {
	_, err := inDir(in.cfg.CNIBinDir, 0o755, func(d *hostfs.Dir) (struct{}, error) {
		for _, name := range PluginBinaries {
			fi, err := d.Lstat(name)
			if err == nil && !fi.Mode().IsRegular() {
				err = fmt.Errorf("a %v, not a regular file", fi.Mode().Type())
			}
			if err != nil {
				return struct{}{}, fmt.Errorf("not chaining istio-cni: %s in %s: %w", name, in.cfg.CNIBinDir, err)
			}
		}
		return struct{}{}, nil
	})
	return err
}

func (in *Installer) installKubeconfig() outcome {
	// The run directory's other contents first, whatever the token: after
	// a reboot emptied /var/run the conflist on disk already names them.
	// Without them the plugin logs to the runtime only and records
	// nothing; its verbs still work, so this is not a failed step.
	if err := in.ensureRunDirs(); err != nil {
		in.log.Warn("the plugin's directories in the run directory", "error", err)
	}
	src, err := kubeconfig.FromServiceAccount(in.cfg.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST", in.cfg.APIHost, "KUBERNETES_SERVICE_PORT", in.cfg.APIPort)
	if err != nil {
		return outcome{problem: err}
	}
	if in.tokens != nil {
		// Without a valid minted token the file keeps the last one.
		if src.Token, err = in.tokens.current(); err != nil {
			return outcome{problem: err}
		}
	}
	data, err := kubeconfig.Build(src)
	if err != nil {
		return outcome{problem: err}
	}
	changed, err := inDir(in.cfg.RunDir, 0o700, func(d *hostfs.Dir) (bool, error) {
		return d.WriteFile(KubeconfigName, data, 0o600)
	})
	why := classifyWrite(changed, data, in.files.lastKubeconfig)
	if err == nil {
		in.files.lastKubeconfig = data
	}
	return outcome{why: why, problem: err}
}

// updateReadiness: ready only while no step failed, every watch is armed,
// and the runtime's pick (the first config file) is our chained conflist.
func (in *Installer) updateReadiness() {
	var problems []error
	for _, file := range []string{fileBinary, fileKubeconfig, fileConflist} {
		problems = append(problems, in.files.problems[file])
	}
	switch err := errors.Join(problems...); {
	case in.fights.active != nil:
		in.setReady(false, "conflict: "+in.fights.active.String()+"; repairing at most once a second")
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
	if !in.cfg.Chained {
		return in.verifyStandalone()
	}
	cd, err := ReadConfDir(in.cfg.CNINetDir)
	if err != nil {
		return err
	}
	files := cd.Names()
	owned := in.files.owned
	if !slices.Contains(files, owned) {
		in.metrics.Preempted.Set(0)
		return fmt.Errorf("our conflist %q is missing", owned)
	}
	if files[0] != owned {
		in.metrics.Preempted.Set(1)
		return fmt.Errorf("%s sorts before our %s", files[0], owned)
	}
	in.metrics.Preempted.Set(0)
	// Read through no symlink someone planted there.
	f, _ := cd.Lookup(owned)
	if f.Data == nil {
		return fmt.Errorf("our conflist %q is not a regular file", owned)
	}
	data := f.Data
	if in.cfg.Mode == Inplace {
		// The primary is the file itself, our entry inside it.
		return chain.Verify(data, &chain.Primary{Name: owned, Data: data}, in.entry())
	}
	p, err := in.findPrimary(cd)
	if err != nil {
		return err
	}
	return chain.Verify(data, p, in.entry())
}

// verifyStandalone checks that the standalone config is exactly ours.
// Which configs Multus delegates to is the NetworkAttachmentDefinition's
// business, not the file order's.
func (in *Installer) verifyStandalone() error {
	name := in.cfg.OwnedConfigName
	data, err := inDir(in.cfg.CNINetDir, 0o755, func(d *hostfs.Dir) ([]byte, error) { return d.ReadFile(name) })
	if err != nil {
		return err
	}
	want, err := chain.Standalone(in.entry())
	if err != nil {
		return err
	}
	if !bytes.Equal(data, want) {
		return fmt.Errorf("%s is not istio-cni's standalone config", name)
	}
	return nil
}
