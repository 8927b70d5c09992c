package install

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// installConflist writes the chained conflist for the current primary,
// deciding from cd, the config directory as this reconcile read it.
func (in *Installer) installConflist(cd chain.Dir) outcome {
	o, err := inDir(in.cfg.CNINetDir, 0o755, func(netd *hostfs.Dir) (outcome, error) {
		switch {
		case !in.cfg.Chained:
			return in.installStandalone(netd, cd), nil
		case in.cfg.Mode == Inplace:
			return in.installInplace(netd, cd), nil
		}
		return in.installOwned(netd, cd), nil
	})
	if err != nil {
		return outcome{problem: err}
	}
	return o
}

// installOwned writes our own conflist, named to sort before every other
// config file.
func (in *Installer) installOwned(netd *hostfs.Dir, cd chain.Dir) outcome {
	files := cd.Names()
	p, err := in.findPrimary(cd)
	// The primary we follow is still there but does not parse: it is being
	// rewritten in place (truncate, write). Keep the copy of its last valid
	// content rather than drop it or copy another network.
	// (A named primary that came after is no such case: it is the one.)
	named := err == nil && in.cfg.PrimaryConfigName != "" && (p.Name == in.cfg.PrimaryConfigName || p.Name == swapListExt(in.cfg.PrimaryConfigName))
	if in.files.primary != "" && slices.Contains(files, in.files.primary) && !named && (errors.Is(err, chain.ErrNoPrimary) || (err == nil && p.Name > in.files.primary)) {
		return outcome{problem: fmt.Errorf("the primary %s does not parse now (being rewritten?); keeping our chained copy of its last valid content", in.files.primary)}
	}
	if errors.Is(err, chain.ErrNoPrimary) {
		// No primary CNI: a copy of one must not outlive it, here or from an
		// earlier run.
		in.files.owned, in.files.primary = "", ""
		return outcome{problem: errors.Join(err, in.removeStaleOwned(netd, cd))}
	}
	if err != nil {
		return outcome{problem: err}
	}
	// Sort before the primary and before any foreign file ahead of it, even
	// an invalid one: containerd stops at the first file.
	before := p.Name
	if first := in.firstForeign(cd); first != "" && first < before {
		before = first
	}
	name, renamed, err := chain.OwnedName(in.cfg.OwnedConfigName, before)
	if err != nil {
		return outcome{problem: err}
	}
	// Upstream's entries stay as the file is now, not as the reconcile
	// first read it: its shutdown may have taken them out meanwhile.
	keep, _ := netd.ReadFile(name)
	if !in.upstreamBinaryHere(keep) {
		keep = nil
	}
	data, err := chain.Owned(p, in.entry(), keep)
	if err != nil {
		return outcome{problem: err}
	}
	changed, err := netd.WriteFile(name, data, in.cfg.ConfMode())
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
	return outcome{why: why, problem: in.removeStaleOwned(netd, cd), foreign: foreign}
}

// installStandalone writes istio-cni's own one-plugin config, for Multus:
// no primary is read, none is needed.
func (in *Installer) installStandalone(netd *hostfs.Dir, cd chain.Dir) outcome {
	data, err := chain.Standalone(in.entry())
	if err != nil {
		return outcome{problem: err}
	}
	name := in.cfg.OwnedConfigName
	changed, err := netd.WriteFile(name, data, in.cfg.ConfMode())
	if err != nil {
		return outcome{problem: err}
	}
	why := classifyWrite(changed, data, in.files.lastConflist)
	in.files.owned, in.files.primary, in.files.lastConflist = name, "", data
	return outcome{why: why, problem: in.removeStaleOwned(netd, cd)}
}

// upstreamBinaryHere: data holds upstream Istio's entry, and its binary
// (<bin dir>/istio-cni, not an earlier release's of ours) has not been
// removed. Only then does that entry stay in a file we write: a config
// naming a binary that is gone fails every pod. Upstream's shutdown takes
// its entry out first, then its kubeconfig and its binary; each removal is
// an event (reasonUpstreamFiles) that runs the conflist step again. Only a
// binary that is not there counts as gone: on any other error the entry
// stays (dropping a healthy upstream's entry would start a fight with its
// installer, which inserts it again).
func (in *Installer) upstreamBinaryHere(data []byte) bool {
	if data == nil || !chain.UpstreamEntry(data) {
		return false
	}
	here, err := inDir(in.cfg.CNIBinDir, 0o755, func(d *hostfs.Dir) (bool, error) {
		if _, err := d.Lstat(LegacyPluginBinary); errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return !in.ownsBinary(d, LegacyPluginBinary), nil
	})
	return here || (err != nil && !errors.Is(err, fs.ErrNotExist))
}

// firstForeign is the first config file that is not ours, or "".
func (in *Installer) firstForeign(cd chain.Dir) string {
	for _, f := range cd.Files {
		if !in.isOurs(f) {
			return f.Name
		}
	}
	return ""
}

// isOurs: the configured name, the current one, or a generated name
// holding our entry, even when upstream Istio's installer, which chains
// into the first config, has put its entry there too.
func (in *Installer) isOurs(f chain.File) bool {
	if f.Name == in.cfg.OwnedConfigName || (f.Name == in.files.owned && in.cfg.Mode == Owned) {
		return true
	}
	return strings.HasSuffix(f.Name, chain.OwnedSuffix) && chain.IsOwned(f.Name, f.Data)
}

// removeStaleOwned removes conflists we wrote under other names (for an
// earlier primary, by an earlier run of the agent, or in the other mode),
// as cd lists them. One that upstream Istio's installer chained into is
// its config now: only our entry comes out (it removes its entry there
// itself, before its binary, at its uninstall).
func (in *Installer) removeStaleOwned(netd *hostfs.Dir, cd chain.Dir) error {
	var errs []error
	for _, f := range cd.Files {
		if f.Name == in.files.owned || !in.isOurs(f) {
			continue
		}
		if f.Data != nil && chain.UpstreamEntry(f.Data) {
			out, err := chain.WithoutOurEntry(f.Data)
			if err == nil && !bytes.Equal(out, f.Data) {
				in.log.Info("taking our entry out of our old conflist, which upstream Istio's installer chains into", "name", f.Name, "now", in.files.owned)
				_, err = netd.WriteFile(f.Name, out, f.Mode.Perm())
			}
			errs = append(errs, err)
			continue
		}
		in.log.Info("removing our conflist under an old name", "name", f.Name, "now", in.files.owned)
		if err := netd.Remove(f.Name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// installInplace inserts our entry into the primary's own file. A .conf
// primary becomes a .conflist of the same stem (runtimes read only
// .conflist files as lists): the new file is written before the old one is
// removed, and sorts right after it, so the runtime never finds neither.
func (in *Installer) installInplace(netd *hostfs.Dir, cd chain.Dir) outcome {
	p, err := in.findPrimary(cd)
	if err != nil {
		return outcome{problem: err}
	}
	// The primary as it is now: upstream's shutdown may have taken its
	// entry out since the reconcile read it.
	if fresh, err := netd.ReadFile(p.Name); err == nil {
		p = &chain.Primary{Name: p.Name, Mode: p.Mode, Data: fresh}
	}
	data, err := chain.Inplace(p, in.entry(), in.upstreamBinaryHere(p.Data))
	if err != nil {
		return outcome{problem: err}
	}
	name, renamed := chain.InplaceName(p.Name)
	if renamed {
		// A .conflist of that stem is ours from before (the primary rewrote
		// its .conf meanwhile, or we crashed between write and remove)
		// unless it lacks our entry.
		if old, ok := cd.Lookup(name); ok && old.Data != nil && !chain.HasEntry(old.Data) {
			return outcome{problem: fmt.Errorf("converting %s to a list: %s already exists and is not ours", p.Name, name)}
		}
	}
	// The primary's own file keeps its owner's mode.
	changed, err := netd.WriteFile(name, data, p.Mode.Perm())
	if err == nil && renamed {
		err = netd.Remove(p.Name)
	}
	why := classifyWrite(changed, data, in.files.lastConflist)
	in.files.owned, in.files.primary, in.files.lastConflist = name, name, data
	return outcome{why: why, problem: errors.Join(err, in.removeStaleOwned(netd, cd))}
}

// findPrimary is the primary to chain after: the named one (owned mode
// only: our copy sorts first, so the runtime runs it whichever primary
// it copies), or the first (skipping our own files). A named primary that
// is not there, under its name or with .conf and .conflist swapped as
// upstream's installer tries, is reported and the first is taken: waiting
// for it would leave the node unchained, its meshed pods unredirected.
func (in *Installer) findPrimary(cd chain.Dir) (*chain.Primary, error) {
	if in.cfg.Mode == Inplace {
		return chain.FindPrimary(cd, in.cfg.OwnedConfigName)
	}
	first := func() (*chain.Primary, error) {
		return chain.FindPrimary(cd, in.cfg.OwnedConfigName, in.ownedNames()...)
	}
	name := in.cfg.PrimaryConfigName
	if name == "" {
		return first()
	}
	for _, n := range []string{name, swapListExt(name)} {
		if _, ok := cd.Lookup(n); ok {
			return chain.NamedPrimary(cd, n)
		}
	}
	p, err := first()
	if err == nil && in.files.primary != p.Name {
		in.log.Warn("the named primary is not in the config directory; chaining after the first valid config, as the runtime picks",
			"primary_config_name", name, "dir", in.cfg.CNINetDir, "chained_after", p.Name)
	}
	return p, err
}

// swapListExt: name.conf for name.conflist and the other way round.
func swapListExt(name string) string {
	if stem, ok := strings.CutSuffix(name, ".conflist"); ok {
		return stem + ".conf"
	}
	if stem, ok := strings.CutSuffix(name, ".conf"); ok {
		return stem + ".conflist"
	}
	return name
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
