package install

import (
	"errors"
	"io/fs"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// legacyFile is an earlier release's file under one of upstream's names.
type legacyFile struct {
	dir, name string
	ours      func(*hostfs.Dir) bool
}

// removeLegacy removes what an earlier release of this project installed
// under the names upstream Istio's istio-cni uses too (LegacyPluginBinary,
// LegacyKubeconfigName), RuntimeDrain after no config here names that
// release's type any more (this one chains its own, chain.PluginType): a
// sandbox set up before runs the old chain to its end. A file in the
// config directory that could not be read may name it: nothing goes then.
// Each file goes only when it is ours (the binary a build of this module,
// the kubeconfig one this installer built); upstream's stay. Why files
// stay is logged once per reason.
func (in *Installer) removeLegacy() {
	found, err := in.legacyFiles()
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case len(found) == 0:
		in.files.legacyFreeSince, in.files.legacyWhy = time.Time{}, ""
		return
	default:
		why = in.legacyNamed()
	}
	if why != "" {
		in.files.legacyFreeSince = time.Time{}
		if why != in.files.legacyWhy {
			in.log.Info("an earlier release's files stay", "why", why)
		}
		in.files.legacyWhy = why
		return
	}
	now := in.now()
	if in.files.legacyFreeSince.IsZero() {
		in.files.legacyFreeSince = now
	}
	if now.Sub(in.files.legacyFreeSince) < in.cfg.RuntimeDrain {
		return // the loop's tick comes back
	}
	in.files.legacyFreeSince, in.files.legacyWhy = time.Time{}, ""
	for _, l := range found {
		_, err := inDir(l.dir, 0o755, func(d *hostfs.Dir) (struct{}, error) {
			if err := d.Remove(l.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return struct{}{}, err
			}
			return struct{}{}, nil
		})
		if err != nil {
			in.log.Warn("removing an earlier release's file", "file", l.name, "dir", l.dir, "error", err.Error())
			continue
		}
		in.log.Info("removed an earlier release's file, named as upstream Istio's", "file", l.name, "dir", l.dir)
	}
}

// legacyFiles are the earlier release's files that are here and ours.
func (in *Installer) legacyFiles() ([]legacyFile, error) {
	var found []legacyFile
	for _, l := range []legacyFile{
		{in.cfg.CNIBinDir, LegacyPluginBinary, in.ownedBinary(LegacyPluginBinary)},
		{in.cfg.RunDir, LegacyKubeconfigName, ownedKubeconfig(LegacyKubeconfigName)},
	} {
		ours, err := inDir(l.dir, 0o755, func(d *hostfs.Dir) (bool, error) {
			if _, err := d.Lstat(l.name); err != nil {
				return false, nil
			}
			return l.ours(d), nil
		})
		if err != nil {
			return nil, err
		}
		if ours {
			found = append(found, l)
		}
	}
	return found, nil
}

// legacyNamed says which config may still run the earlier release's
// plugin, or "". It reads the directory again: a reconcile's view is from
// before its writes.
func (in *Installer) legacyNamed() string {
	cd, err := ReadConfDir(in.cfg.CNINetDir)
	if err != nil {
		return err.Error()
	}
	for _, f := range cd.Files {
		switch {
		case f.Data == nil:
			return f.Name + " could not be read; it may still chain " + LegacyPluginBinary
		case chain.HasLegacyEntry(f.Data):
			return f.Name + " still chains an earlier release's " + LegacyPluginBinary
		}
	}
	return ""
}
