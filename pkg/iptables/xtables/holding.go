package xtables

import (
	"context"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Holding is p reading each of the model's families where its rules are:
// in p's backend for the family, unless that holds nothing of ours there
// and the other backend does. A family neither holds anything of ours in
// is read where the other family's rules were found (unless its own read
// there failed), else in p's. also are the families both backends hold
// chains of ours in, which a repair must clear from the other. It is for
// a sandbox no record names a writer for: an older build wrote it with the node's iptables, upstream's
// istio-cni with the backend it detects for each family in the pod's
// namespace (nft there whenever iptables-nft exists; on Debian and Ubuntu
// iptables and ip6tables are separate alternatives), and the node's own
// guess can differ from both. A read of p's that fails keeps p's for the
// family (its Check then reports what it can), one of the other's counts
// as holding nothing: neither can pass a pod on a read that did not
// happen.
func (p *Programmer) Holding(ctx context.Context, m iptables.Model) (q *Programmer, also []iptables.Family) {
	found := map[iptables.Family]release.Backend{}
	unread := map[iptables.Family]release.Backend{} // the other backend, its read failed
	for _, rs := range m.Rulesets() {
		f := rs.Family
		mine, other := p.BackendFor(f), p.BackendFor(f).Other()
		if other == "" {
			continue
		}
		held, err := p.holds(ctx, f)
		if err != nil {
			found[f] = mine
			continue
		}
		theirs, err := p.WithBackend(other).holds(ctx, f)
		if err != nil {
			unread[f] = other
		}
		theirs = theirs && err == nil
		switch {
		case held:
			found[f] = mine
			if theirs {
				also = append(also, f)
			}
		case theirs:
			found[f] = other
		}
	}
	at := func(f, sibling iptables.Family) release.Backend {
		if b, ok := found[f]; ok {
			return b
		}
		if b, ok := found[sibling]; ok && unread[f] != b {
			return b
		}
		return p.BackendFor(f)
	}
	return p.WithBackends(at(iptables.IPv4, iptables.IPv6), at(iptables.IPv6, iptables.IPv4)), also
}

// WithBackend is p reading and writing through b, both families.
func (p *Programmer) WithBackend(b release.Backend) *Programmer {
	return p.WithBackends(b, b)
}

// WithBackends is p reading and writing IPv4 through v4, IPv6 through v6.
func (p *Programmer) WithBackends(v4, v6 release.Backend) *Programmer {
	q := *p
	q.Backend, q.BackendIPv6 = v4, ""
	if v6 != v4 {
		q.BackendIPv6 = v6
	}
	return &q
}

// holds reports whether p's backend for f holds any rule or chain of ours
// in the family.
func (p *Programmer) holds(ctx context.Context, f iptables.Family) (bool, error) {
	obs, err := p.Read(ctx, f)
	if err != nil {
		return false, err
	}
	return !obs.Empty(), nil
}
