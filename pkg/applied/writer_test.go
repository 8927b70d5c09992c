package applied

import (
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// TestRecordWriter: a record's writer is what it names, family by family;
// a record that names none, or a backend no build writes, is read as the
// node guesses.
func TestRecordWriter(t *testing.T) {
	node := Writer{Backend: release.NFT}
	for _, tc := range []struct {
		name   string
		r      Record
		v4, v6 release.Backend
		guess  bool
	}{
		{"one backend", Record{Backend: release.Legacy}, release.Legacy, release.Legacy, false},
		{"IPv6 in another", Record{Backend: release.NFT, BackendIPv6: release.Legacy}, release.NFT, release.Legacy, false},
		{"none named", Record{}, release.NFT, release.NFT, true},
		{"IPv6's unknown", Record{Backend: release.Legacy, BackendIPv6: "auto"}, release.NFT, release.NFT, true},
		{"IPv4's unknown", Record{Backend: "x", BackendIPv6: release.Legacy}, release.NFT, release.NFT, true},
	} {
		w := tc.r.Writer(node)
		if w.For(iptables.IPv4) != tc.v4 || w.For(iptables.IPv6) != tc.v6 || w.Guessed != tc.guess {
			t.Errorf("%s: %+v; want IPv4 %s, IPv6 %s, guessed %v", tc.name, w, tc.v4, tc.v6, tc.guess)
		}
	}
	if w := (Record{Native: true, Backend: release.NFT, BackendIPv6: release.Legacy}).Writer(node); !w.Native || w.Backend != "" || w.BackendIPv6 != "" {
		t.Errorf("a native record's writer: %+v", w)
	}
}

// TestOtherKind: the other kind of a node's writer keeps the node's
// iptables backend, and its iptables are read where found.
func TestOtherKind(t *testing.T) {
	iptablesNode := Writer{Backend: release.Legacy, BackendIPv6: release.NFT}
	nativeNode := Writer{Backend: release.Legacy, BackendIPv6: release.NFT, Native: true}
	if got := iptablesNode.Guess().OtherKind(); got != nativeNode {
		t.Errorf("an iptables node's other kind %+v, want %+v", got, nativeNode)
	}
	if got, want := nativeNode.Guess().OtherKind(), iptablesNode.Guess(); got != want || !got.Guessed {
		t.Errorf("a native node's other kind %+v, want %+v", got, want)
	}
}
