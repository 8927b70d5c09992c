package decision

import (
	"net/netip"
	"testing"
)

// An IPv4-mapped range excludes IPv4 traffic: it must land in the IPv4 rules.
func TestParsePrefixesUnmapsIPv4Mapped(t *testing.T) {
	got, err := ParsePrefixes(ExcludeOutboundIPRanges, "::ffff:169.254.169.254/128,::ffff:10.0.0.0/104")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32"), netip.MustParsePrefix("10.0.0.0/8")}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParsePrefixes(ExcludeOutboundIPRanges, "::ffff:0:0/80"); err == nil {
		t.Error("a mapped range wider than /96 must be rejected")
	}
}

func TestParsePrefixesRejectsIPv4Compatible(t *testing.T) {
	for _, v := range []string{"::a00:0/104", "::10.0.0.1/128"} {
		if _, err := ParsePrefixes(ExcludeOutboundIPRanges, v); err == nil {
			t.Errorf("%s: IPv4-compatible ranges must be rejected", v)
		}
	}
	for _, v := range []string{"::/0", "::1/128", "::6/128", "0.0.0.0/0"} {
		if _, err := ParsePrefixes(ExcludeOutboundIPRanges, v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}
