package chain

import (
	"io/fs"
	"path/filepath"
	"slices"
)

// Dir is a CNI config directory as one read of it saw it, the only input
// chain decides from: the installer reads the node's directory once per
// reconcile (install.ReadConfDir), and tests write literal values.
type Dir struct {
	// Path is the directory's, for messages.
	Path string
	// Files are the entries runtimes would read (an Extensions name, not a
	// directory), sorted as runtimes sort them (libcni.ConfFiles, then
	// lexical order), hidden names included.
	Files []File
	// PluginConfs are each subdirectory's .conf files, by subdirectory
	// name: libcni >= 1.3 appends <dir>/<network name>/*.conf to a list.
	PluginConfs map[string][]File
}

// File is one entry of a Dir.
type File struct {
	Name string
	// Mode is the entry's type and permission bits, as Lstat says.
	Mode fs.FileMode
	// Size is a regular file's length.
	Size int64
	// Data is a regular file's content; nil for anything else, for a file
	// over MaxConfigSize, which is not read, and for one that could not be
	// read (ReadErr says why).
	Data    []byte
	ReadErr string
	// LinkToRegular: a symlink whose target is a regular file (what the
	// runtime would read through it; the installer never follows it).
	LinkToRegular bool
}

// MaxConfigSize bounds a CNI config file read from the node: real ones are
// a few kilobytes.
const MaxConfigSize = 1 << 20

// Names are the files' names, in the runtime's order.
func (d Dir) Names() []string {
	names := make([]string, len(d.Files))
	for i, f := range d.Files {
		names[i] = f.Name
	}
	return names
}

// Lookup finds a file by name.
func (d Dir) Lookup(name string) (File, bool) {
	i := slices.IndexFunc(d.Files, func(f File) bool { return f.Name == name })
	if i < 0 {
		return File{}, false
	}
	return d.Files[i], true
}

// IsConfigName reports whether runtimes would read a file of this name.
func IsConfigName(name string) bool {
	return slices.Contains(Extensions, filepath.Ext(name))
}

// Extensions are the file extensions runtimes read CNI configs from.
var Extensions = []string{".conf", ".conflist", ".json"}
