package decision

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestFamilies(t *testing.T) {
	v4, v6, mapped := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("::ffff:10.0.0.5")
	errNetns := errors.New("netns gone")
	for _, tc := range []struct {
		name       string
		policy     IPv6Policy
		dualStack  bool
		addrs      []netip.Addr
		netnsV6    bool
		netnsErr   error
		wantV6     bool
		wantIPv4PX bool // IPv4OnlyProxy
		wantAsked  bool
		wantErr    bool
	}{
		{name: "ipv4 only", addrs: []netip.Addr{v4}, wantAsked: true},
		{name: "mapped ipv4 is ipv4", addrs: []netip.Addr{mapped}, wantAsked: true},
		{name: "ipv6 address, ipv4-first: captured, proxy ipv4 only", addrs: []netip.Addr{v4, v6}, wantV6: true, wantIPv4PX: true},
		{name: "ipv6-first: the proxy binds [::]", addrs: []netip.Addr{v6, v4}, wantV6: true},
		{name: "dual stack asked", dualStack: true, wantV6: true},
		{name: "netns has ipv6 the addresses lack", addrs: []netip.Addr{v4}, netnsV6: true, wantV6: true, wantIPv4PX: true, wantAsked: true},
		{name: "no addresses known", netnsV6: false, wantAsked: true},
		{name: "netns unreadable", netnsErr: errNetns, wantAsked: true, wantErr: true},
		{name: "dual-stack-only: ipv4-first without ISTIO_DUAL_STACK", policy: IPv6DualStackOnly, addrs: []netip.Addr{v4, v6}},
		{name: "dual-stack-only: the netns is not asked", policy: IPv6DualStackOnly, addrs: []netip.Addr{v4}, netnsV6: true},
		{name: "dual-stack-only: ISTIO_DUAL_STACK", policy: IPv6DualStackOnly, dualStack: true, addrs: []netip.Addr{v4, v6}, wantV6: true},
		{name: "dual-stack-only: ipv6-first", policy: IPv6DualStackOnly, addrs: []netip.Addr{v6, v4}, wantV6: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			policy := tc.policy
			if policy == "" {
				policy = IPv6Always
			}
			got, err := Families(policy, tc.dualStack, tc.addrs, func() (bool, error) {
				asked = true
				return tc.netnsV6, tc.netnsErr
			})
			if (err != nil) != tc.wantErr || asked != tc.wantAsked {
				t.Fatalf("err=%v asked=%v, want err=%v asked=%v", err, asked, tc.wantErr, tc.wantAsked)
			}
			if err == nil && (!got.V4 || got.V6 != tc.wantV6 || got.IPv4OnlyProxy != tc.wantIPv4PX) {
				t.Errorf("%+v, want v4 v6=%v ipv4-only proxy=%v", got, tc.wantV6, tc.wantIPv4PX)
			}
		})
	}
}

func TestParseIPv6Policy(t *testing.T) {
	for in, want := range map[string]IPv6Policy{"": IPv6Always, "always": IPv6Always, "dual-stack-only": IPv6DualStackOnly} {
		if got, err := ParseIPv6Policy(in); err != nil || got != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	if _, err := ParseIPv6Policy("never"); err == nil || !strings.Contains(err.Error(), "want always or dual-stack-only") {
		t.Errorf("never: %v", err)
	}
}
