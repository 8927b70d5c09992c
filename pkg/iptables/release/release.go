// Package release tells whether the node's iptables for a family is
// nf_tables at the release whose layout pkg/iptables/nfnl writes, from
// what the plugin remembered of it in cache_dir: the program a backend
// names, where it is on the node, the file it leads to, and the release
// remembered for that file. Only the plugin's own check runs the program
// (through a Reader it passes in).
//
// The shim asks before every hand-off, so this package links nothing
// whose start a process pays for: no os/exec, no rule model, no crypto,
// no JSON (cmd/plugin's dependency test holds it to that).
package release

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Layout is the iptables-nft release whose encoding nfnl.Write
// reproduces. Releases encode some matches differently (1.8.8 and 1.8.10
// changed ports, protocols and address order), and an iptables-save of
// one release can silently misprint another's encoding, so nfnl writes
// only on nodes whose iptables is this release.
const Layout = "1.8.9"

// The backends, as the plugin's config names them (xtables.Backend).
const (
	Auto   = "auto"
	Legacy = "legacy"
	NFT    = "nft"
)

// Programs names a family's restore and save programs for a backend:
// Auto's are the node's own iptables-restore and iptables-save.
func Programs(backend string, ipv6 bool) (restore, save string) {
	base := "iptables"
	if ipv6 {
		base = "ip6tables"
	}
	switch backend {
	case Legacy:
		base += "-legacy"
	case NFT:
		base += "-nft"
	}
	return base + "-restore", base + "-save"
}

// Reader runs the program name, found at path, for its release, and
// remembers it in cacheFile under key, the identity the program had
// before it ran (Key); it returns the release.
type Reader func(cacheFile, name, path, key string) (string, error)

// Writable says why a family's rules cannot be written over netlink on
// this node, or nil: the backend resolves to nf_tables, at Layout's
// release, so that iptables-save prints them as iptables-restore wrote
// them. The release is remembered in cacheDir; a release not remembered
// is read with read, or is a no when read is nil.
func Writable(backend string, ipv6 bool, cacheDir string, read Reader) error {
	family := "ipv4"
	if ipv6 {
		family = "ipv6"
	}
	switch {
	case cacheDir == "":
		return errors.New("no cache_dir")
	case backend == Legacy:
		return fmt.Errorf("%s backend %s", family, backend)
	case backend == "":
		backend = Auto
	case backend != Auto && backend != NFT:
		return fmt.Errorf("unknown iptables backend %q: want %s, %s or %s", backend, Auto, Legacy, NFT)
	}
	// The shim and ADD ask on every pod: a remembered release costs a
	// lookup on PATH, a stat and a small read (only an nf_tables
	// program's release is remembered); the symlinks are walked, to tell
	// the backend, only when it is not.
	name, _ := Programs(backend, ipv6)
	path, err := LookPath(name)
	if err != nil {
		return err
	}
	cacheFile := filepath.Join(cacheDir, name+".version")
	v, key, err := Remembered(cacheFile, name, path)
	if err == nil && v == "" {
		real, lerr := filepath.EvalSymlinks(path)
		if lerr != nil {
			return fmt.Errorf("resolving %s: %w", path, lerr)
		}
		if r := BackendAt(path, real); backend == Auto && r != NFT {
			return fmt.Errorf("%s backend %s", family, r)
		}
		if read != nil {
			// Remembered under the identity taken before the backend
			// was told: a switch since is caught after the run.
			v, err = read(cacheFile, name, path, key)
		}
	}
	switch {
	case err != nil:
		return err
	case v == "":
		return fmt.Errorf("%s's release is not in %s yet", name, cacheDir)
	case v != Layout:
		return fmt.Errorf("%s is iptables %s, whose layout is not %s's", name, v, Layout)
	}
	return nil
}
