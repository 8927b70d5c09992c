package chain

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// Primary is the node's primary CNI config, as the runtime would pick it.
type Primary struct {
	Name string      // file base name in the dir
	Mode fs.FileMode // permission bits of the primary file (Cilium uses 0600); the owned file copies them
	Data []byte      // raw file content
}

// ErrNoPrimary: no valid primary config in the directory (yet).
var ErrNoPrimary = errors.New("no valid primary CNI config")

// FindPrimary returns the config the runtime would use, ignoring our own:
// the first file of d (the runtime's order) that parses as the runtime
// parses it (a .conflist as a plugin list, a .conf or .json as one plugin
// config), skipping
//   - ownedName and the names in skip, whatever they hold;
//   - our own output from an earlier run: a name ending in OwnedSuffix
//     whose list has an istio-cni entry (IsOwned).
//
// A foreign file with an istio-cni entry (inplace mode, an old upstream
// install) is a legitimate primary: Owned drops the stale entry.
//
// Invalid files are skipped as CRI-O does (containerd instead fails on
// them); the ErrNoPrimary error lists them with the reason. A symlink to a
// regular file or a file over MaxConfigSize, which the runtime would read,
// is an error that names it: the installer follows no link and reads no
// unbounded file as root. A list whose network also takes plugins from
// <dir>/<name>/ (libcni >= 1.3) is an error, not a skip: those run after
// the inline list, so after istio-cni.
func FindPrimary(d Dir, ownedName string, skip ...string) (*Primary, error) {
	var skipped []string
	for _, f := range d.Files {
		if f.Name == ownedName || slices.Contains(skip, f.Name) {
			continue
		}
		p, c, err := readPrimary(d, f)
		switch {
		case stopsSearch(err):
			return nil, err
		case err != nil:
			skipped = append(skipped, err.Error())
			continue
		case strings.HasSuffix(f.Name, OwnedSuffix) && c.hasEntry():
			continue
		}
		return p, nil
	}
	if len(skipped) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoPrimary, d.Path)
	}
	return nil, fmt.Errorf("%w in %s (skipped %s)", ErrNoPrimary, d.Path, strings.Join(skipped, "; "))
}

// NamedPrimary is the primary an admin named (upstream's cniConfFileName)
// rather than the first: file name in d, read as FindPrimary reads each
// file. While it is absent or invalid the error wraps ErrNoPrimary: the
// installer waits for it, as for a node with no primary yet.
func NamedPrimary(d Dir, name string) (*Primary, error) {
	f, ok := d.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w in %s: the named primary %s does not exist", ErrNoPrimary, d.Path, name)
	}
	p, _, err := readPrimary(d, f)
	switch {
	case stopsSearch(err):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w in %s: the named primary: %w", ErrNoPrimary, d.Path, err)
	}
	return p, nil
}

// IsOwned reports whether a file is owned mode's output under a generated
// name: its name ends in OwnedSuffix and its list has an istio-cni entry.
// The installer uses it to find owned files left by an earlier primary.
func IsOwned(name string, data []byte) bool {
	if !strings.HasSuffix(name, OwnedSuffix) {
		return false
	}
	c, err := parseList(data)
	return err == nil && c.hasEntry()
}

// stopsSearch: a file the runtime would use that cannot be chained after
// (a plugin directory) or read (refused) is an error, never skipped.
func stopsSearch(err error) bool {
	var pd *pluginDirError
	var refused *refusedError
	return errors.As(err, &pd) || errors.As(err, &refused)
}

// refusedError is a file the runtime would use but the installer will not
// read: a symlink (following it as root would read anything the link names,
// outside the directory) or an oversized file. Like a plugin directory, it
// stops the search: skipping it would chain after the wrong primary.
type refusedError struct{ name, why string }

func (e *refusedError) Error() string {
	return fmt.Sprintf("refusing CNI config %s: %s", e.name, e.why)
}

func readPrimary(d Dir, f File) (*Primary, *conflist, error) {
	switch {
	case f.LinkToRegular:
		// Only where it leads, never what it holds: a link to a regular
		// file is one the runtime reads.
		return nil, nil, &refusedError{f.Name, "a symlink, which istio-cni does not follow in the CNI config directory; make it a regular file"}
	case f.Mode&fs.ModeSymlink != 0:
		return nil, nil, fmt.Errorf("%s: a symlink to no regular file", f.Name)
	case !f.Mode.IsRegular():
		return nil, nil, fmt.Errorf("%s: not a regular file", f.Name)
	case f.Size > MaxConfigSize:
		return nil, nil, &refusedError{f.Name, fmt.Sprintf("%d bytes, more than the %d a CNI config may hold", f.Size, MaxConfigSize)}
	case f.Data == nil:
		// The runtime may read it: skipping it could chain after the wrong
		// primary. The next change of the directory reads it again.
		why := f.ReadErr
		if why == "" {
			why = "unknown error"
		}
		return nil, nil, &refusedError{f.Name, "cannot be read (" + why + "); waiting for it to change"}
	}
	p := &Primary{Name: f.Name, Mode: f.Mode.Perm(), Data: f.Data}
	// First: a list with plugins only in its directory is valid to the
	// runtime, so it must stop the search, not be skipped.
	if err := checkPluginDir(d, p); err != nil {
		return nil, nil, err
	}
	c, err := parsePrimary(p)
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// pluginDirError: the primary's chain continues in <dir>/<name>/*.conf.
type pluginDirError struct{ name, network, dir string }

func (e *pluginDirError) Error() string {
	return fmt.Sprintf("%s: network %q also loads plugins from %s (libcni >= 1.3); they would run after istio-cni, so it cannot chain; inline them in the list or set \"loadOnlyInlinedPlugins\": true",
		e.name, e.network, e.dir)
}

// checkPluginDir: a .conflist without loadOnlyInlinedPlugins gets more
// plugins from <dir>/<network name>/*.conf (libcni's NetworkConfFromFile).
// An unparsable plugin there makes the runtime reject the file.
func checkPluginDir(d Dir, p *Primary) error {
	if list, _ := isListFile(p.Name); !list {
		return nil
	}
	l, err := libcni.NetworkConfFromBytes(p.Data)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	extra := d.PluginConfs[l.Name]
	if l.LoadOnlyInlinedPlugins || len(extra) == 0 {
		return nil
	}
	for _, f := range extra {
		if f.Mode&fs.ModeSymlink != 0 && f.Name == l.Name {
			return &refusedError{p.Name, fmt.Sprintf("network %q may also load plugins from %s, a symlink, which istio-cni does not follow; they would run after istio-cni: make it a directory or set \"loadOnlyInlinedPlugins\": true",
				l.Name, filepath.Join(d.Path, l.Name))}
		}
		if f.Data == nil {
			return fmt.Errorf("%s: plugin config %s/%s cannot be read", p.Name, l.Name, f.Name)
		}
		if _, err := libcni.NetworkPluginConfFromBytes(f.Data); err != nil {
			return fmt.Errorf("%s: %s/%s: %w", p.Name, l.Name, f.Name, err)
		}
	}
	return &pluginDirError{name: p.Name, network: l.Name, dir: filepath.Join(d.Path, l.Name)}
}
