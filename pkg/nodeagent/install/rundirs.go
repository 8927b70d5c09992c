package install

import (
	"errors"
	"slices"

	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// runDirs are the directories in RunDir that the plugin writes into but
// never makes: its log, its sandbox records and its cache. The installer makes them
// before any conflist names them, and again when one goes; the uninstall
// removes them whole. A plugin invocation that outlives the uninstall (a
// DEL already exec'd, an ADD waiting on the API) then finds nowhere to
// write, and leaves nothing behind.
var runDirs = []string{LogDirName, RecordsDirName, CacheDirName}

func isRunDir(name string) bool { return slices.Contains(runDirs, name) }

// legacyLogs are where releases before LogDirName kept the plugin's log.
var legacyLogs = []string{PluginLogName, PluginLogName + ".1"}

// ensureRunDirs makes runDirs (0700). Anything else at their names, a
// file or a symlink, is removed first: the plugin runs as root and must
// not write through a link. A log left by an earlier release goes.
func (in *Installer) ensureRunDirs() error {
	_, err := inDir(in.cfg.RunDir, 0o700, func(d *hostfs.Dir) (struct{}, error) {
		var errs []error
		for _, name := range runDirs {
			if fi, err := d.Lstat(name); err == nil && !fi.IsDir() {
				errs = append(errs, d.RemoveTree(name))
			}
			errs = append(errs, d.Mkdir(name, 0o700))
		}
		errs = append(errs, removeRegular(d, legacyLogs))
		return struct{}{}, errors.Join(errs...)
	})
	return err
}

// removeRunDirs removes runDirs, the temp names an interrupted removal
// left, and the logs of earlier releases.
func (in *Installer) removeRunDirs() error {
	_, err := inDir(in.cfg.RunDir, 0o755, func(d *hostfs.Dir) (struct{}, error) {
		var errs []error
		for _, name := range runDirs {
			errs = append(errs, d.RemoveTree(name))
		}
		errs = append(errs, d.RemoveTempTrees(isRunDir), removeRegular(d, legacyLogs))
		return struct{}{}, errors.Join(errs...)
	})
	return err
}

// removeRegular removes those of names that are regular files.
func removeRegular(d *hostfs.Dir, names []string) error {
	var errs []error
	for _, name := range names {
		if fi, err := d.Lstat(name); err == nil && fi.Mode().IsRegular() {
			errs = append(errs, d.Remove(name))
		}
	}
	return errors.Join(errs...)
}
