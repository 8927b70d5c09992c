package install

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/hostfs"
)

// installConflist writes the chained conflist for the current primary.
func (in *Installer) installConflist() outcome {
	o, err := inDir(in.cfg.CNINetDir, 0o755, func(netd *hostfs.Dir) (outcome, error) {
		switch {
		case !in.cfg.Chained:
			return in.installStandalone(netd), nil
		case in.cfg.Mode == Inplace:
			return in.installInplace(netd), nil
		}
		return in.installOwned(netd), nil
	})
	if err != nil {
		return outcome{problem: err}
	}
	return o
}

// installOwned writes our own conflist, named to sort before every other
// config file.
func (in *Installer) installOwned(netd *hostfs.Dir) outcome {
	files, err := chain.ConfigFiles(netd.Path())
	if err != nil {
		return outcome{problem: err}
	}
	p, err := chain.FindPrimary(netd.Path(), in.cfg.OwnedConfigName, in.ownedNames()...)
	// The primary we follow is still there but does not parse: it is being
	// rewritten in place (truncate, write). Keep the copy of its last valid
	// content rather than drop it or copy another network.
	if in.files.primary != "" && slices.Contains(files, in.files.primary) && (errors.Is(err, chain.ErrNoPrimary) || (err == nil && p.Name > in.files.primary)) {
		return outcome{problem: fmt.Errorf("the primary %s does not parse now (being rewritten?); keeping our chained copy of its last valid content", in.files.primary)}
	}
	if errors.Is(err, chain.ErrNoPrimary) {
		// No primary CNI: a copy of one must not outlive it, here or from an
		// earlier run.
		in.files.owned, in.files.primary = "", ""
		return outcome{problem: errors.Join(err, in.removeStaleOwned(netd))}
	}
	if err != nil {
		return outcome{problem: err}
	}
	// Sort before the primary and before any foreign file ahead of it, even
	// an invalid one: containerd stops at the first file.
	before := p.Name
	if first := in.firstForeign(netd, files); first != "" && first < before {
		before = first
	}
	name, renamed, err := chain.OwnedName(in.cfg.OwnedConfigName, before)
	if err != nil {
		return outcome{problem: err}
	}
	data, err := chain.Owned(p, in.entry())
	if err != nil {
		return outcome{problem: err}
	}
	changed, err := netd.WriteFile(name, data, p.Mode.Perm())
	if err != nil {
		return outcome{problem: err}
	}
	why := classifyWrite(changed, data, in.files.lastConflist)
	foreign := ""
	if in.files.owned != "" && name != in.files.owned && before < in.files.owned {
		why, foreign = writePreempted, before
		in.metrics.Preemptions.Inc()
		in.log.Warn("preempted: a foreign config sorts before ours; took priority back", "foreign", before, "was", in.files.owned, "now", name)
	} else if renamed && name != in.files.owned {
		in.log.Info("a config sorts before the preferred name; using another", "before", before, "preferred", in.cfg.OwnedConfigName, "name", name)
	}
	if name != in.files.owned && why == writeRepair {
		why = writeUpdate // same content under a new name: the primary moved
	}
	in.files.owned, in.files.primary, in.files.lastConflist = name, p.Name, data
	return outcome{why: why, problem: in.removeStaleOwned(netd), foreign: foreign}
}

// installStandalone writes istio-cni's own one-plugin config, for Multus:
// no primary is read, none is needed.
func (in *Installer) installStandalone(netd *hostfs.Dir) outcome {
	data, err := chain.Standalone(in.entry())
	if err != nil {
		return outcome{problem: err}
	}
	name := in.cfg.OwnedConfigName
	changed, err := netd.WriteFile(name, data, 0o600)
	if err != nil {
		return outcome{problem: err}
	}
	why := classifyWrite(changed, data, in.files.lastConflist)
	in.files.owned, in.files.primary, in.files.lastConflist = name, "", data
	return outcome{why: why, problem: in.removeStaleOwned(netd)}
}

// otherInstaller returns a config file holding an istio-cni entry that
// upstream Istio's installer wrote, or "": while one is there, that
// installer manages istio-cni on this node (the same binary name and
// kubeconfig path), and this one touches nothing.
func (in *Installer) otherInstaller() string {
	name, _ := inDir(in.cfg.CNINetDir, 0o755, func(netd *hostfs.Dir) (string, error) {
		files, err := chain.ConfigFiles(netd.Path())
		if err != nil {
			return "", err
		}
		for _, f := range files {
			if data, err := netd.ReadFile(f); err == nil && chain.UpstreamEntry(data) {
				return f, nil
			}
		}
		return "", nil
	})
	return name
}

// firstForeign is the first config file that is not ours, or "".
func (in *Installer) firstForeign(netd *hostfs.Dir, files []string) string {
	for _, name := range files {
		if !in.isOurs(netd, name) {
			return name
		}
	}
	return ""
}

// isOurs: the configured name, the current one, or a generated name
// holding our entry.
func (in *Installer) isOurs(netd *hostfs.Dir, name string) bool {
	if name == in.cfg.OwnedConfigName || (name == in.files.owned && in.cfg.Mode == Owned) {
		return true
	}
	if !strings.HasSuffix(name, chain.OwnedSuffix) {
		return false
	}
	data, err := netd.ReadFile(name)
	return err == nil && chain.IsOwned(name, data)
}

// removeStaleOwned removes conflists we wrote under other names (for an
// earlier primary, by an earlier run of the agent, or in the other mode).
func (in *Installer) removeStaleOwned(netd *hostfs.Dir) error {
	files, err := chain.ConfigFiles(netd.Path())
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range files {
		if name == in.files.owned || !in.isOurs(netd, name) {
			continue
		}
		in.log.Info("removing our conflist under an old name", "name", name, "now", in.files.owned)
		errs = append(errs, netd.Remove(name))
	}
	return errors.Join(errs...)
}

// installInplace inserts our entry into the primary's own file. A .conf
// primary becomes a .conflist of the same stem (runtimes read only
// .conflist files as lists): the new file is written before the old one is
// removed, and sorts right after it, so the runtime never finds neither.
func (in *Installer) installInplace(netd *hostfs.Dir) outcome {
	p, err := chain.FindPrimary(netd.Path(), in.cfg.OwnedConfigName)
	if err != nil {
		return outcome{problem: err}
	}
	data, err := chain.Inplace(p, in.entry())
	if err != nil {
		return outcome{problem: err}
	}
	name, renamed := chain.InplaceName(p.Name)
	if renamed {
		// A .conflist of that stem is ours from before (the primary rewrote
		// its .conf meanwhile, or we crashed between write and remove)
		// unless it lacks our entry.
		if old, err := netd.ReadFile(name); err == nil && !chain.HasEntry(old) {
			return outcome{problem: fmt.Errorf("converting %s to a list: %s already exists and is not ours", p.Name, name)}
		}
	}
	changed, err := netd.WriteFile(name, data, p.Mode.Perm())
	if err == nil && renamed {
		err = netd.Remove(p.Name)
	}
	why := classifyWrite(changed, data, in.files.lastConflist)
	in.files.owned, in.files.primary, in.files.lastConflist = name, name, data
	return outcome{why: why, problem: errors.Join(err, in.removeStaleOwned(netd))}
}

// ownedNames are the names of conflists we may have written, never taken
// for the primary.
func (in *Installer) ownedNames() []string {
	names := []string{in.cfg.OwnedConfigName}
	if in.files.owned != "" && in.files.owned != in.cfg.OwnedConfigName && in.cfg.Mode == Owned {
		names = append(names, in.files.owned)
	}
	return names
}
