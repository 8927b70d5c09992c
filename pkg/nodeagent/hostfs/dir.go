// Package hostfs writes the installer's files into host directories
// (/opt/cni/bin, /etc/cni/net.d, ...) so that a reader such as the kubelet
// never sees a half-written file and a symlink planted in the directory never
// redirects a write.
package hostfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ErrSymlink is returned (wrapped) when a name in a Dir is a symlink and the
// operation would have to follow it.
var ErrSymlink = errors.New("refusing to follow a symlink")

// MaxReadSize bounds ReadFile: the files read in the node's directories
// are configs and kubeconfigs of a few kilobytes.
const MaxReadSize = 1 << 20

// ErrTooLarge is returned (wrapped) by ReadFile for a file over MaxReadSize.
var ErrTooLarge = errors.New("larger than 1 MiB")

// Dir is a directory the installer owns files in. Operations never follow a
// symlink at the file name (a link there is replaced, not written through)
// and never leave the directory.
//
// Dir holds a descriptor of the directory opened by OpenDir: if the directory
// is later removed and recreated at the same path, Dir still refers to the
// old one. Reopen it when that may have happened.
type Dir struct {
	path string
	root *os.Root
}

// OpenDir opens the existing directory at path. Symlinks in path itself are
// followed (the admin configures it, and /var/run -> /run is common); every
// later operation is confined below it.
func OpenDir(path string) (*Dir, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("opening directory %s: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("opening directory %s: not a directory (%s)", path, fi.Mode().Type())
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("opening directory %s: %w", path, err)
	}
	return &Dir{path: path, root: root}, nil
}

// Close releases the directory descriptor.
func (d *Dir) Close() error { return d.root.Close() }

// Path is the path the directory was opened with.
func (d *Dir) Path() string { return d.path }

func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

// checkName accepts only a single path element, so no name can reach a
// subdirectory or the parent.
func (d *Dir) checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("file name %q in %s: must be a single path element, not empty, \".\" or \"..\"", name, d.path)
	}
	return nil
}

// Lstat describes name itself (a symlink is not followed).
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	fi, err := d.root.Lstat(name)
	if err != nil {
		return nil, fmt.Errorf("lstat %s: %w", d.join(name), err)
	}
	return fi, nil
}

// ReadFile reads the regular file name. A symlink at name is an error
// wrapping ErrSymlink.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	f, err := d.openRegular(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.join(name), err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxReadSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", d.join(name), err)
	}
	if len(data) > MaxReadSize {
		return nil, fmt.Errorf("reading %s: %w", d.join(name), ErrTooLarge)
	}
	return data, nil
}

// Remove removes name if present. A symlink is removed itself, never its
// target; a directory is refused rather than removed.
func (d *Dir) Remove(name string) error {
	fi, err := d.toRemove(name)
	if fi == nil || err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("removing %s: is a directory, not a file", d.join(name))
	}
	// unlinkat acts on the link itself, never its target.
	if err := d.root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", d.join(name), err)
	}
	return nil
}

// toRemove checks name and describes what is there (not following a
// link); nil, nil when nothing is.
func (d *Dir) toRemove(name string) (fs.FileInfo, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	fi, err := d.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("removing %s: %w", d.join(name), err)
	}
	return fi, nil
}

// openRegular opens name for reading only if name itself is a regular file.
// os.Root follows symlinks that stay inside the root, so the entry is
// checked with Lstat and the opened file must be that same entry: a name
// swapped for a link between the two calls is caught by the identity check.
func (d *Dir) openRegular(name string) (*os.File, error) {
	before, err := d.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if before.Mode()&fs.ModeSymlink != 0 {
		return nil, ErrSymlink
	}
	if !before.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", before.Mode().Type())
	}
	// O_NONBLOCK: a FIFO swapped in after the Lstat must not block the open.
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	opened, err := f.Stat()
	if err == nil && !os.SameFile(before, opened) {
		err = errors.New("the file was replaced while it was being opened")
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// SameAs reports whether name is a regular file (not a symlink) with the
// content of src, a file outside d.
func (d *Dir) SameAs(name, src string) (bool, error) {
	f, err := d.openRegular(name)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	s, err := os.Open(src) // #nosec G304 -- the caller's own file (the image's binary)
	if err != nil {
		return false, err
	}
	defer func() { _ = s.Close() }()
	return sameBytes(f, s)
}

// Open opens name for reading if it is a regular file, never through a
// symlink.
func (d *Dir) Open(name string) (*os.File, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	return d.openRegular(name)
}

// Entries lists the directory's entries, sorted by name.
func (d *Dir) Entries() ([]fs.DirEntry, error) {
	f, err := d.root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.path, err)
	}
	defer func() { _ = f.Close() }()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.path, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

// Sub opens the subdirectory name, confined below d as d is; a symlink at
// name is not followed.
func (d *Dir) Sub(name string) (*Dir, error) {
	if err := d.checkName(name); err != nil {
		return nil, err
	}
	fi, err := d.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory (%s)", d.join(name), fi.Mode().Type())
	}
	root, err := d.root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	return &Dir{path: d.join(name), root: root}, nil
}

// LinksToRegular reports whether name is a symlink whose target is a
// regular file. Only the target's type is looked at (stat, never a read),
// wherever it is.
func (d *Dir) LinksToRegular(name string) bool {
	fi, err := os.Stat(d.join(name)) // #nosec G304 -- a stat, never a read, of where a link leads
	return err == nil && fi.Mode().IsRegular()
}
