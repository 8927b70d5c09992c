package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
)

// Mkdir makes the subdirectory name with mode if it is missing. An existing
// directory is kept as it is; anything else at name (a file, a symlink) is
// an error, never followed.
func (d *Dir) Mkdir(name string, mode fs.FileMode) error {
	if err := d.checkName(name); err != nil {
		return err
	}
	err := d.root.Mkdir(name, mode)
	if errors.Is(err, fs.ErrExist) {
		fi, lerr := d.root.Lstat(name)
		if lerr != nil {
			return fmt.Errorf("making directory %s: %w", d.join(name), lerr)
		}
		if fi.IsDir() {
			return nil
		}
		return fmt.Errorf("making directory %s: something else is there (%s)", d.join(name), fi.Mode().Type())
	}
	if err != nil {
		return fmt.Errorf("making directory %s: %w", d.join(name), err)
	}
	return nil
}

// RemoveTree removes the subdirectory name and everything in it. It first
// renames the directory to a hidden temp name, so a process that opens
// files by the old path (and may create them, but never the directory)
// finds nothing there from that instant, and cannot put a file back into
// a directory that is being emptied. A symlink at name is removed itself.
func (d *Dir) RemoveTree(name string) error {
	fi, err := d.toRemove(name)
	if fi == nil || err != nil {
		return err
	}
	if !fi.IsDir() {
		return d.Remove(name)
	}
	tmp, err := tempName(name)
	if err != nil {
		return err
	}
	if err := d.root.Rename(name, tmp); err != nil {
		return fmt.Errorf("removing %s: %w", d.join(name), err)
	}
	if err := d.root.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing %s (renamed %s): %w", d.join(name), tmp, err)
	}
	return nil
}

// RemoveTempTrees removes the directories an interrupted RemoveTree left
// under their temp names, for the names target accepts.
func (d *Dir) RemoveTempTrees(target func(name string) bool) error {
	entries, err := d.Entries()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if name, ok := tempTarget(e.Name()); ok && target(name) && e.IsDir() {
			errs = append(errs, d.root.RemoveAll(e.Name()))
		}
	}
	return errors.Join(errs...)
}
