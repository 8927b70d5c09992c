package applied

import (
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Writer is how a sandbox's rules are written, and so how they are read
// back: iptables through Backend (IPv6 through BackendIPv6 when set), or
// native nftables (the plugin's native_nftables).
type Writer struct {
	Backend     release.Backend
	BackendIPv6 release.Backend
	Native      bool
	// Guessed: no record names the iptables backend ADD wrote with;
	// Backend is the node's guess, and each family's rules are read
	// where they are found (podnet.Network.FindBackend).
	Guessed bool
}

// For is the iptables backend of family f's rules.
func (w Writer) For(f iptables.Family) release.Backend {
	if f == iptables.IPv6 && w.BackendIPv6 != "" {
		return w.BackendIPv6
	}
	return w.Backend
}

// Writer is how ADD wrote this sandbox's rules: as the record says, else
// as node, the node's plugin, writes them now (Guessed). A node can hold
// sandboxes written both ways (its iptables or native_nftables changed
// since), and the node's own guess can be wrong for them: on a node whose
// iptables leads to legacy while its primary's image writes nf_tables,
// only the record tells.
func (r Record) Writer(node Writer) Writer {
	switch {
	case r.Native:
		return Writer{Native: true}
	case r.Backend.Concrete() && (r.BackendIPv6 == "" || r.BackendIPv6.Concrete()):
		return Writer{Backend: r.Backend, BackendIPv6: r.BackendIPv6}
	case node.Native:
		// An iptables record on a node now native: the node's iptables
		// backend, as detected.
		return Writer{Backend: node.Backend, BackendIPv6: node.BackendIPv6, Guessed: true}
	}
	return node.Guess()
}

// Guess is w for a sandbox no record names a writer for. Native stays
// unguessed: native tables are ours alone, and there is no other
// backend to look in.
func (w Writer) Guess() Writer {
	w.Guessed = !w.Native
	return w
}

// OtherKind is how a plugin with the other native_nftables setting than
// w's would have written a sandbox no record names a writer for: native
// nftables for iptables, and for native the node's iptables, read where
// found. Upstream's istio-cni writes either, as global.nativeNftables
// said when it started the pod, which the switch to this one may have
// changed.
func (w Writer) OtherKind() Writer {
	return Writer{Backend: w.Backend, BackendIPv6: w.BackendIPv6, Native: !w.Native, Guessed: w.Native}
}

// Kind names w's kind of writer as logs and errors say it.
func (w Writer) Kind() string {
	if w.Native {
		return "native nftables"
	}
	return "iptables"
}
