// Package release tells whether the node's iptables for a family is
// nf_tables at the release whose layout pkg/iptables/nfnl writes, from
// what the plugin remembered of it in cache_dir: the program a backend
// names, where it is on the node, the file it leads to, and the release
// remembered for that file. Only the plugin's own check runs the program
// (through a Reader it passes in).
//
// The shim asks before every hand-off, so this package stays small: no
// os/exec, crypto or rule model (cmd/plugin's dependency test holds the
// shim to that).
package release

import (
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Layouts are the iptables-nft releases whose encodings nfnl.Write
// reproduces (nfnl.Layout). Releases encode some matches differently
// (1.8.8 changed ports and marks, 1.8.10 protocols and address order), and an
// iptables-save of one release can silently misprint another's encoding,
// so nfnl writes only on nodes whose iptables is one of these, in its
// own layout.
var Layouts = []string{"1.8.7", "1.8.8", "1.8.9", "1.8.10", "1.8.11", "1.8.12", "1.8.13"}

// HasLayout says whether nfnl lays rules out as release v writes them.
func HasLayout(v string) bool { return slices.Contains(Layouts, v) }

// Backend is which iptables writes and reads a pod's rules, as the
// plugin's iptables_backend names it. Auto uses the node's own
// iptables-restore and iptables-save: whichever the node's alternatives
// (Debian, Ubuntu, RHEL) point `iptables` at, nft or legacy, so the pod's
// rules live where the node's tools and anyone running `iptables-save` in
// the pod's namespace look for them, at no extra process. Legacy and NFT
// pin one for nodes whose default differs from what the rest of the node
// uses.
type Backend string

const (
	Auto   Backend = "auto"
	Legacy Backend = "legacy"
	NFT    Backend = "nft"
)

// Backends lists the valid values, for error messages.
const Backends = "auto, legacy or nft"

// ParseBackend validates a configured backend; "" means Auto.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case "":
		return Auto, nil
	case Auto, Legacy, NFT:
		return b, nil
	}
	return "", errors.New("unknown iptables backend " + strconv.Quote(s) + ": want " + Backends)
}

// Programs names a family's restore and save programs: Auto's are the
// node's own iptables-restore and iptables-save.
func (b Backend) Programs(ipv6 bool) (restore, save string) {
	base := "iptables"
	if ipv6 {
		base = "ip6tables"
	}
	switch b {
	case Legacy:
		base += "-legacy"
	case NFT:
		base += "-nft"
	}
	return base + "-restore", base + "-save"
}

// Concrete reports whether b names one backend (legacy or nft), not
// Auto or nothing.
func (b Backend) Concrete() bool { return b == Legacy || b == NFT }

// Other is the concrete backend b is not; "" for Auto.
func (b Backend) Other() Backend {
	switch b {
	case Legacy:
		return NFT
	case NFT:
		return Legacy
	}
	return ""
}

// Resolve says which backend Auto is on this node for a family's
// programs (on Debian and Ubuntu iptables and ip6tables are separate
// alternatives, which can differ): where the node's restore program leads
// through its symlinks (At). Pinned backends are themselves. It runs no
// process.
func (b Backend) Resolve(ipv6 bool) (Backend, error) {
	if b != Auto {
		return b, nil
	}
	restore, _ := b.Programs(ipv6)
	p, err := LookPath(restore)
	if err != nil {
		return "", err
	}
	return At(p)
}

// A Miss is asked about the program name, found at path, when cacheFile
// remembers no release for key, the identity it has now (Key): it says
// why the program is not one to write for (not nf_tables, say), or reads
// its release and remembers it, or returns "" for no answer yet.
type Miss func(cacheFile, name, path, key string) (string, error)

// Writable returns the release of a family's iptables when its rules can
// be written over netlink on this node, or says why not: the backend
// resolves to nf_tables, at a release in Layouts, so that iptables-save
// prints them as iptables-restore wrote them. The release is remembered
// in cacheDir; on a miss, miss is asked, and a nil miss is a no.
func Writable(backend Backend, ipv6 bool, cacheDir string, miss Miss) (string, error) {
	family := "ipv4"
	if ipv6 {
		family = "ipv6"
	}
	switch {
	case cacheDir == "":
		return "", errors.New("no cache_dir")
	case backend == Legacy:
		return "", errors.New(family + " backend " + string(backend))
	case backend == "":
		backend = Auto
	case backend != Auto && backend != NFT:
		return "", errors.New("unknown iptables backend " + strconv.Quote(string(backend)) + ": want " + Backends)
	}
	// The shim and ADD ask on every pod: a remembered release costs a
	// lookup on PATH, a stat and a small read (only an nf_tables
	// program's release is remembered); the symlinks are walked, to tell
	// the backend, only on a miss.
	name, _ := backend.Programs(ipv6)
	p, err := LookPath(name)
	if err != nil {
		return "", err
	}
	cacheFile := path.Join(cacheDir, name+".version")
	v, key, err := Remembered(cacheFile, name, p)
	if err == nil && v == "" && miss != nil {
		v, err = miss(cacheFile, name, p, key)
	}
	switch {
	case err != nil:
		return "", err
	case v == "":
		return "", errors.New("no nf_tables release of " + name + " is remembered in " + cacheDir + " (the plugin remembers one once it finds the program is nf_tables)")
	case !HasLayout(v):
		return "", errors.New(name + " is iptables " + v + ", whose layout is not one of " + strings.Join(Layouts, ", "))
	}
	return v, nil
}
