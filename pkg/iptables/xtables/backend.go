package xtables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// Backend selects the iptables implementation.
//
// Auto uses the node's own iptables-restore and iptables-save: whichever the
// node's alternatives (Debian, Ubuntu, RHEL) point `iptables` at, nft or
// legacy, so the pod's rules live where the node's tools and anyone running
// `iptables-save` in the pod's namespace look for them. It costs no extra
// process, which matters because every pod pays for the plugin's start-up.
// Legacy and NFT pin one implementation for nodes whose default differs from
// what the rest of the node uses.
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
	return "", fmt.Errorf("unknown iptables backend %q: want %s", s, Backends)
}

// Commands are the two programs used for one family.
type Commands struct {
	Restore string
	Save    string
}

// CommandsFor names the restore and save programs of a family.
func (b Backend) CommandsFor(f iptables.Family) Commands {
	base := "iptables"
	if f == iptables.IPv6 {
		base = "ip6tables"
	}
	switch b {
	case Legacy:
		base += "-legacy"
	case NFT:
		base += "-nft"
	}
	return Commands{Restore: base + "-restore", Save: base + "-save"}
}

// sbinDirs are searched after PATH: container runtimes may exec plugins with
// a PATH that lacks the sbin directories where iptables lives.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// LookPath finds a program in PATH or the sbin directories.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %v", name, sbinDirs)
}

// Resolve says which implementation Auto is on this host: where the
// node's iptables-restore leads through its symlinks (the alternatives
// system) — xtables-nft-multi or xtables-legacy-multi (iptables 1.8+), an
// iptables-nft-restore or iptables-legacy-restore name. A plain binary
// without either name is legacy (iptables before 1.8). Pinned backends are
// themselves. It runs no process.
func (b Backend) Resolve() (Backend, error) { return b.ResolveFamily(iptables.IPv4) }

// ResolveFamily is Resolve for one family's programs: on Debian and Ubuntu
// iptables and ip6tables are separate alternatives, which can differ.
func (b Backend) ResolveFamily(f iptables.Family) (Backend, error) {
	if b != Auto {
		return b, nil
	}
	path, err := LookPath(b.CommandsFor(f).Restore)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	return backendAt(path, real), nil
}

// backendAt is the implementation of the program at path, which leads to
// real: its names say, else a link to a name with nft in it; else legacy.
func backendAt(path, real string) Backend {
	for _, name := range []string{filepath.Base(path), filepath.Base(real)} {
		switch {
		case strings.Contains(name, "nft"):
			return NFT
		case strings.Contains(name, "legacy"):
			return Legacy
		}
	}
	if link, err := os.Readlink(path); err == nil && strings.Contains(link, "nft") {
		return NFT
	}
	return Legacy
}

// Detect picks the backend the node uses from the rules in the calling
// thread's network namespace (the host's, for the agent): the one holding
// more rules, as the node's kubelet and kube-proxy wrote them with the
// node's iptables; nft when neither holds any (every current distribution's
// default). Programs run through r, which must have both backends.
func Detect(ctx context.Context, r Runner) Backend {
	count := func(b Backend) int {
		out, err := r.Run(ctx, nil, b.CommandsFor(iptables.IPv4).Save)
		if err != nil {
			return -1
		}
		return strings.Count(string(out), "\n-A ")
	}
	if count(Legacy) > count(NFT) {
		return Legacy
	}
	return NFT
}
