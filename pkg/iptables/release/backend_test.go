package release

import "testing"

// TestConcreteAndOther: legacy and nft name one backend each, and each is
// the other's other; auto, nothing and anything else name none.
func TestConcreteAndOther(t *testing.T) {
	for _, tc := range []struct {
		b        Backend
		concrete bool
		other    Backend
	}{
		{Legacy, true, NFT},
		{NFT, true, Legacy},
		{Auto, false, ""},
		{"", false, ""},
		{"iptables", false, ""},
	} {
		if got := tc.b.Concrete(); got != tc.concrete {
			t.Errorf("%q.Concrete() = %v, want %v", tc.b, got, tc.concrete)
		}
		if got := tc.b.Other(); got != tc.other {
			t.Errorf("%q.Other() = %q, want %q", tc.b, got, tc.other)
		}
	}
}
