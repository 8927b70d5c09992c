package chain

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/pkg/hostfs"
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
// the lexically first file in dir with a .conf, .conflist or .json
// extension (libcni.ConfFiles, sorted) that parses as the runtime parses it
// (a .conflist as a plugin list, a .conf or .json as one plugin config),
// skipping
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
// unbounded file as root. A list whose
// network also takes plugins from <dir>/<name>/ (libcni >= 1.3) is an error,
// not a skip: those run after the inline list, so after istio-cni.
func FindPrimary(dir, ownedName string, skip ...string) (*Primary, error) {
	files, err := libcni.ConfFiles(dir, Extensions)
	if err != nil {
		return nil, fmt.Errorf("listing CNI config dir %s: %w", dir, err)
	}
	sort.Strings(files)
	var skipped []string
	for _, path := range files {
		name := filepath.Base(path)
		if name == ownedName || slices.Contains(skip, name) {
			continue
		}
		p, c, err := readPrimary(dir, name)
		var pd *pluginDirError
		var refused *refusedError
		switch {
		case errors.As(err, &pd), errors.As(err, &refused):
			return nil, err
		case err != nil:
			skipped = append(skipped, err.Error())
			continue
		case strings.HasSuffix(name, OwnedSuffix) && c.hasEntry():
			continue
		}
		return p, nil
	}
	if len(skipped) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoPrimary, dir)
	}
	return nil, fmt.Errorf("%w in %s (skipped %s)", ErrNoPrimary, dir, strings.Join(skipped, "; "))
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

// MaxConfigSize bounds a CNI config file read from the node: real ones are
// a few kilobytes.
const MaxConfigSize = 1 << 20

// refusedError is a file the runtime would use but the installer will not
// read: a symlink (following it as root would read anything the link names,
// outside the directory) or an oversized file. Like a plugin directory, it
// stops the search: skipping it would chain after the wrong primary.
type refusedError struct{ name, why string }

func (e *refusedError) Error() string {
	return fmt.Sprintf("refusing CNI config %s: %s", e.name, e.why)
}

func readPrimary(dir, name string) (*Primary, *conflist, error) {
	path := filepath.Join(dir, name)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Only where it leads, never what it holds: a link to a regular
		// file is one the runtime reads.
		if target, err := os.Stat(path); err == nil && target.Mode().IsRegular() {
			return nil, nil, &refusedError{name, "a symlink, which istio-cni does not follow in the CNI config directory; make it a regular file"}
		}
		return nil, nil, fmt.Errorf("%s: a symlink to no regular file", name)
	}
	if !fi.Mode().IsRegular() {
		// A FIFO would block the read.
		return nil, nil, fmt.Errorf("%s: not a regular file", name)
	}
	if fi.Size() > MaxConfigSize {
		return nil, nil, &refusedError{name, fmt.Sprintf("%d bytes, more than the %d a CNI config may hold", fi.Size(), MaxConfigSize)}
	}
	d, err := hostfs.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = d.Close() }()
	data, err := d.ReadFile(name)
	switch {
	case errors.Is(err, hostfs.ErrTooLarge):
		return nil, nil, &refusedError{name, err.Error()}
	case err != nil:
		return nil, nil, err
	}
	p := &Primary{Name: name, Mode: fi.Mode().Perm(), Data: data}
	// First: a list with plugins only in its directory is valid to the
	// runtime, so it must stop the search, not be skipped.
	if err := checkPluginDir(dir, p); err != nil {
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
// An unreadable plugin there makes the runtime reject the file.
func checkPluginDir(dir string, p *Primary) error {
	if list, _ := isListFile(p.Name); !list {
		return nil
	}
	l, err := libcni.NetworkConfFromBytes(p.Data)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	if l.LoadOnlyInlinedPlugins {
		return nil
	}
	extra, err := libcni.NetworkPluginConfsFromFiles(dir, l.Name)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	if len(extra) > 0 {
		return &pluginDirError{name: p.Name, network: l.Name, dir: filepath.Join(dir, l.Name)}
	}
	return nil
}
