package xtables

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
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
	Auto   Backend = release.Auto
	Legacy Backend = release.Legacy
	NFT    Backend = release.NFT
)

// Backends lists the valid values, for error messages.
const Backends = release.Backends

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
	restore, save := release.Programs(string(b), f == iptables.IPv6)
	return Commands{Restore: restore, Save: save}
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
	path, err := release.LookPath(b.CommandsFor(f).Restore)
	if err != nil {
		return "", err
	}
	return backendAt(path)
}

// backendAt is the implementation the program at path leads to, through
// its symlinks (release.BackendAt).
func backendAt(path string) (Backend, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	return Backend(release.BackendAt(path, real)), nil
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
