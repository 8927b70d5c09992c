package nfnl

import (
	"maps"
	"slices"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// The releases nfnl lays out are the ones release says it does (the shim
// links release, not nfnl): a release in one list only would be handed
// to an agent that cannot write it, or never handed off.
func TestLayoutsAreTheReleases(t *testing.T) {
	if got, want := slices.Sorted(maps.Keys(layouts)), slices.Sorted(slices.Values(release.Layouts)); !slices.Equal(got, want) {
		t.Errorf("nfnl lays out %v, release.Layouts says %v", got, want)
	}
	for _, v := range release.Layouts {
		if l, ok := LayoutOf(v); !ok || l.Release() != v {
			t.Errorf("LayoutOf(%s) = %+v, %v", v, l, ok)
		}
	}
	for _, v := range []string{"1.8.6", "1.8.99", "1.9.0", "", "1.8.9 "} {
		if l, ok := LayoutOf(v); ok || l.Release() != "" {
			t.Errorf("LayoutOf(%q) = %+v, %v; want none", v, l, ok)
		}
	}
}
