package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/fsutil"
	"istio-cni.local/istio-cni/pkg/kubeconfig"
)

// trigger is why a reconcile runs.
type trigger struct {
	reason string    // "install" at start-up, else what changed
	file   string    // the file whose change was noticed, if any
	ours   bool      // the change was to one of our own files
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
	var wrote []string
	step := func(file string, f func() (bool, error)) {
		if !t.concerns(file) {
			return
		}
		changed, err := f()
		if in.problems == nil {
			in.problems = map[string]error{}
		}
		in.problems[file] = nil
		if err != nil {
			in.problems[file] = fmt.Errorf("%s: %w", file, err)
		}
		if changed {
			wrote = append(wrote, file)
			in.metrics.Writes.WithLabelValues(file, t.reason).Inc()
		}
	}
	step(fileBinary, in.installBinary)
	step(fileKubeconfig, in.installKubeconfig)
	preempted := false
	step(fileConflist, func() (bool, error) {
		changed, pre, err := in.installConflist()
		preempted = pre
		return changed, err
	})
	if len(wrote) > 0 {
		d := in.now().Sub(t.at)
		if t.reason != reasonInstall {
			in.metrics.RepairSeconds.Observe(d.Seconds())
		}
		in.log.Info("installed", "wrote", strings.Join(wrote, ","), "reason", t.reason, "file", t.file,
			"conflist", in.owned, "primary", in.primary, "ms", float64(d.Microseconds())/1000)
		if (t.ours || preempted) && t.reason != reasonInstall {
			in.countRepair(t, preempted)
		}
	}
	var problems []error
	for _, file := range []string{fileBinary, fileKubeconfig, fileConflist} {
		problems = append(problems, in.problems[file])
	}
	in.updateReadiness(errors.Join(problems...))
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
	case reasonKubeconfig, reasonToken:
		return file == fileKubeconfig
	case reasonConflistChanged, reasonConflistDeleted, reasonConfigChanged, reasonConfigRemoved:
		return file == fileConflist
	}
	return true // install, re-armed watches, lost events, end of a conflict
}

// Trigger reasons, also the "reason" label of the writes metric.
const (
	reasonInstall         = "install"
	reasonBinary          = "binary_changed"
	reasonKubeconfig      = "kubeconfig_changed"
	reasonToken           = "token_rotated"
	reasonConflistChanged = "conflist_changed"
	reasonConflistDeleted = "conflist_deleted"
	reasonConfigChanged   = "config_changed"
	reasonConfigRemoved   = "config_removed"
)

func (in *Installer) installBinary() (bool, error) {
	return inDir(in.cfg.CNIBinDir, 0o755, func(d *fsutil.Dir) (bool, error) {
		return d.CopyFile(PluginBinary, filepath.Join(in.cfg.PluginSource, PluginBinary), 0o755)
	})
}

func (in *Installer) installKubeconfig() (bool, error) {
	src, err := kubeconfig.FromServiceAccount(in.cfg.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST", in.cfg.APIHost, "KUBERNETES_SERVICE_PORT", in.cfg.APIPort)
	if err != nil {
		return false, err
	}
	data, err := kubeconfig.Build(src)
	if err != nil {
		return false, err
	}
	return inDir(in.cfg.KubeconfigDir, 0o700, func(d *fsutil.Dir) (bool, error) {
		return d.WriteFile(KubeconfigName, data, 0o600)
	})
}

// installConflist writes the chained conflist for the current primary.
// preempted reports that a foreign config had come to sort before ours.
func (in *Installer) installConflist() (changed, preempted bool, err error) {
	_, err = inDir(in.cfg.CNINetDir, 0o755, func(netd *fsutil.Dir) (struct{}, error) {
		if in.cfg.Mode == Inplace {
			changed, err = in.installInplace(netd)
		} else {
			changed, preempted, err = in.installOwned(netd)
		}
		return struct{}{}, err
	})
	return changed, preempted, err
}

// installOwned writes our own conflist, named to sort before the primary.
func (in *Installer) installOwned(netd *fsutil.Dir) (changed, preempted bool, err error) {
	p, err := chain.FindPrimary(netd.Path(), in.cfg.OwnedConfigName, in.ownedNames()...)
	if errors.Is(err, chain.ErrNoPrimary) && in.owned != "" {
		// The primary CNI is gone: a copy of it must not outlive it.
		in.log.Warn("the primary config is gone; removing our copy of it", "conflist", in.owned, "primary", in.primary)
		in.owned, in.primary = "", ""
		return true, false, errors.Join(err, in.removeStaleOwned(netd))
	}
	if err != nil {
		return false, false, err
	}
	name, renamed, err := chain.OwnedName(in.cfg.OwnedConfigName, p.Name)
	if err != nil {
		return false, false, err
	}
	if in.owned != "" && name != in.owned && p.Name < in.owned {
		preempted = true
		in.metrics.Preemptions.Inc()
		in.log.Warn("preempted: a foreign config sorts before ours; taking priority back",
			"foreign", p.Name, "was", in.owned, "now", name)
	} else if renamed && name != in.owned {
		in.log.Info("the primary config sorts before the preferred name; using another",
			"primary", p.Name, "preferred", in.cfg.OwnedConfigName, "name", name)
	}
	data, err := chain.Owned(p, in.entry())
	if err != nil {
		return false, preempted, err
	}
	if changed, err = netd.WriteFile(name, data, p.Mode.Perm()); err != nil {
		return false, preempted, err
	}
	in.owned, in.primary = name, p.Name
	return changed, preempted, in.removeStaleOwned(netd)
}

// removeStaleOwned removes conflists we wrote under other names (for an
// earlier primary, or by an earlier run of the agent): the configured name,
// and generated names holding our entry.
func (in *Installer) removeStaleOwned(netd *fsutil.Dir) error {
	entries, err := os.ReadDir(netd.Path())
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ours := strings.HasSuffix(name, chain.OwnedSuffix) || name == in.cfg.OwnedConfigName
		if name == in.owned || !ours {
			continue
		}
		if data, err := netd.ReadFile(name); err == nil && (name == in.cfg.OwnedConfigName || chain.IsOwned(name, data)) {
			in.log.Info("removing our conflist under its old name", "name", name, "now", in.owned)
			errs = append(errs, netd.Remove(name))
		}
	}
	return errors.Join(errs...)
}

// installInplace inserts our entry into the primary's own file. A .conf
// primary becomes a .conflist of the same stem (runtimes read only
// .conflist files as lists): the new file is written before the old one is
// removed, and sorts right after it, so the runtime never finds neither.
func (in *Installer) installInplace(netd *fsutil.Dir) (bool, error) {
	p, err := chain.FindPrimary(netd.Path(), "")
	if err != nil {
		return false, err
	}
	data, err := chain.Inplace(p, in.entry())
	if err != nil {
		return false, err
	}
	name, renamed := chain.InplaceName(p.Name)
	if renamed {
		if _, err := netd.Lstat(name); err == nil {
			return false, fmt.Errorf("converting %s to a list: %s already exists", p.Name, name)
		}
	}
	changed, err := netd.WriteFile(name, data, p.Mode.Perm())
	if err == nil && renamed {
		err = netd.Remove(p.Name)
	}
	in.owned, in.primary = name, name
	return changed, err
}

// ownedNames are the names of conflists we may have written, never taken
// for the primary.
func (in *Installer) ownedNames() []string {
	names := []string{in.cfg.OwnedConfigName}
	if in.owned != "" && in.owned != in.cfg.OwnedConfigName {
		names = append(names, in.owned)
	}
	return names
}

// updateReadiness: ready only while nothing failed, every watch is armed,
// and the runtime's pick (the first valid config) is our chained conflist.
func (in *Installer) updateReadiness(problem error) {
	switch {
	case problem != nil:
		in.setReady(false, problem.Error())
	case !in.watching:
		in.setReady(false, "watches not armed")
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
	files, err := libcni.ConfFiles(in.cfg.CNINetDir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return err
	}
	if len(files) == 0 || filepath.Base(files[0]) != in.owned {
		first := "nothing"
		if len(files) > 0 {
			first = filepath.Base(files[0])
			in.metrics.Preempted.Set(1)
		}
		return fmt.Errorf("%s sorts before our %s", first, in.owned)
	}
	in.metrics.Preempted.Set(0)
	data, err := os.ReadFile(files[0])
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

// countRepair records a repair forced on our own files; too many within the
// window mean another writer is fighting us, and we stop.
func (in *Installer) countRepair(t trigger, preempted bool) {
	cutoff := t.at.Add(-in.cfg.ConflictWindow)
	in.repairs = slices.DeleteFunc(append(in.repairs, t.at), func(at time.Time) bool { return at.Before(cutoff) })
	if len(in.repairs) < in.cfg.ConflictRepairs {
		return
	}
	what := fmt.Sprintf("another writer keeps changing %s (%d repairs in %s)", t.file, len(in.repairs), in.cfg.ConflictWindow)
	if preempted {
		what = fmt.Sprintf("%s keeps sorting before our conflist (%d preemptions in %s)", in.primary, len(in.repairs), in.cfg.ConflictWindow)
	}
	in.conflict = "conflict: " + what + "; stopped fighting"
	in.metrics.Conflict.Set(1)
	in.log.Error("conflict with another writer; stopped repairing until it stops", "detail", what,
		"conflist", in.owned, "primary", in.primary)
}
