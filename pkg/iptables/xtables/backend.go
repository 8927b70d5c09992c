package xtables

import (
	"context"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Commands are the two programs used for one family.
type Commands struct {
	Restore string
	Save    string
}

// CommandsFor names a backend's restore and save programs for a family.
func CommandsFor(b release.Backend, f iptables.Family) Commands {
	restore, save := b.Programs(f == iptables.IPv6)
	return Commands{Restore: restore, Save: save}
}

// Detect picks the backend the node uses from the rules in the calling
// thread's network namespace (the host's, for the agent): the one holding
// more rules, as the node's kubelet and kube-proxy wrote them with the
// node's iptables; nft when neither holds any (every current distribution's
// default). Programs run through r, which must have both backends.
func Detect(ctx context.Context, r Runner) release.Backend {
	count := func(b release.Backend) int {
		out, err := r.Run(ctx, nil, CommandsFor(b, iptables.IPv4).Save)
		if err != nil {
			return -1
		}
		return strings.Count(string(out), "\n-A ")
	}
	if count(release.Legacy) > count(release.NFT) {
		return release.Legacy
	}
	return release.NFT
}
