package nfnl

import "istio-cni.local/istio-cni/pkg/iptables/release"

// Layout is how one iptables-nft release encodes rules. Releases differ
// in a few encodings, and a release's iptables-save can misprint another
// release's without a word (1.8.7 prints 1.8.9's native `--dport 15008`
// as nothing), so Write lays rules out as the node's own release does.
// What each differs in was read off the kernel's dump of every golden
// spec as each release writes it (Debian's, releases_linux_test.go; the
// ones recorded from builds of their tags or from a Debian suite make
// test does not unpack, recorded_linux_test.go):
//
//   - 1.8.7 matches ports with the x_tables tcp and udp matches, and
//     marks with the mark match; 1.8.8 on natively (payload, meta mark);
//   - 1.8.10 on load the addresses before the interfaces, and IPv4's
//     protocol from the header (payload) where the older ones use meta
//     l4proto; and make the built-in chains they hook with counters
//     (iptables -L -v counts their policy's packets).
//
// So 1.8.8 writes as 1.8.9 does, and 1.8.10 through 1.8.13 write alike,
// for every spec; a release not listed (older than 1.8.7, or newer than
// 1.8.13) is not laid out, and the plugin writes with the node's own
// iptables-restore there.
type Layout struct {
	release      string
	xtPorts      bool // tcp/udp matches, not payload
	xtMark       bool // mark match, not meta mark
	addrsFirst   bool // addresses, then interfaces, then the protocol
	protoPayload bool // IPv4's protocol from the header, not meta l4proto
	baseCounters bool // built-in chains made with counters
}

// The layouts Write knows, by release.
var layouts = map[string]Layout{
	"1.8.7":  {release: "1.8.7", xtPorts: true, xtMark: true},
	"1.8.8":  {release: "1.8.8"},
	"1.8.9":  {release: "1.8.9"},
	"1.8.10": {release: "1.8.10", addrsFirst: true, protoPayload: true, baseCounters: true},
	"1.8.11": {release: "1.8.11", addrsFirst: true, protoPayload: true, baseCounters: true},
	"1.8.12": {release: "1.8.12", addrsFirst: true, protoPayload: true, baseCounters: true},
	"1.8.13": {release: "1.8.13", addrsFirst: true, protoPayload: true, baseCounters: true},
}

// LayoutOf is the layout of an iptables-nft release, if Write knows it;
// release.Layouts lists the releases (the shim may not link this package).
func LayoutOf(v string) (Layout, bool) {
	l, ok := layouts[v]
	return l, ok && release.HasLayout(v)
}

// Release is the release the layout is that of; "" for the zero Layout,
// which Write refuses.
func (l Layout) Release() string { return l.release }
