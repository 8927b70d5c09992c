package xtables

import (
	"context"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Holding is the iptables backend that holds the model's rules in the
// calling thread's namespace: p's, unless p's holds nothing of ours in any
// of the model's families and the other backend does. alsoOther: both
// hold chains of ours, which a repair must clear from the other. It is
// for a sandbox no record names a writer for: an older build wrote it
// with the node's iptables, upstream's istio-cni with the backend it
// detects in the pod's namespace (nft there whenever iptables-nft
// exists), and the node's own guess can differ from both. A read of p's
// that fails keeps p's (its Check then reports what it can), one of the
// other's counts as holding nothing: neither can pass a pod on a read
// that did not happen.
func (p *Programmer) Holding(ctx context.Context, m iptables.Model) (b release.Backend, alsoOther bool) {
	other := p.Backend.Other()
	if other == "" {
		return p.Backend, false
	}
	mine, err := p.holdsAny(ctx, m)
	if err != nil {
		return p.Backend, false
	}
	theirs, err := p.WithBackend(other).holdsAny(ctx, m)
	theirs = theirs && err == nil
	if !mine && theirs {
		return other, false
	}
	return p.Backend, mine && theirs
}

// WithBackend is p reading and writing through b, both families.
func (p *Programmer) WithBackend(b release.Backend) *Programmer {
	q := *p
	q.Backend, q.BackendIPv6 = b, ""
	return &q
}

// holdsAny reports whether p's backend holds any rule or chain of ours in
// one of the model's families.
func (p *Programmer) holdsAny(ctx context.Context, m iptables.Model) (bool, error) {
	for _, rs := range m.Rulesets() {
		obs, err := p.Read(ctx, rs.Family)
		if err != nil {
			return false, err
		}
		if !obs.Empty() {
			return true, nil
		}
	}
	return false, nil
}
