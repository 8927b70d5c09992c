package applied

import "istio-cni.local/istio-cni/pkg/iptables/release"

// Writer is how a sandbox's rules are written, and so how they are read
// back: iptables through Backend, or native nftables (the plugin's
// native_nftables).
type Writer struct {
	Backend release.Backend
	Native  bool
	// Guessed: no record names the iptables backend ADD wrote with;
	// Backend is the node's guess, and the rules are read where they
	// are found (podnet.Network.FindBackend).
	Guessed bool
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
	case r.Backend == release.Legacy || r.Backend == release.NFT:
		return Writer{Backend: r.Backend}
	case node.Native:
		// An iptables record on a node now native: the node's iptables
		// backend, as detected.
		return Writer{Backend: node.Backend, Guessed: true}
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
