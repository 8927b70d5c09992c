package install

import (
	"fmt"
	"path/filepath"
	"strings"

	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// installBinary copies the image's plugin binaries into CNIBinDir, in
// PluginBinaries' order, each atomically and only when it differs
// (hostfs.CopyFile).
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
