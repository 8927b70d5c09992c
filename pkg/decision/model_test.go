package decision

import (
	"errors"
	"net/netip"
	"testing"
)

func TestFamilies(t *testing.T) {
	v4, v6, mapped := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("::ffff:10.0.0.5")
	errNetns := errors.New("netns gone")
	for _, tc := range []struct {
		name      string
		dualStack bool
		addrs     []netip.Addr
		netnsV6   bool
		netnsErr  error
		wantV6    bool
		wantAsked bool
		wantErr   bool
	}{
		{name: "ipv4 only", addrs: []netip.Addr{v4}, wantAsked: true},
		{name: "mapped ipv4 is ipv4", addrs: []netip.Addr{mapped}, wantAsked: true},
		{name: "ipv6 address", addrs: []netip.Addr{v4, v6}, wantV6: true},
		{name: "dual stack asked", dualStack: true, wantV6: true},
		{name: "netns has ipv6 the addresses lack", addrs: []netip.Addr{v4}, netnsV6: true, wantV6: true, wantAsked: true},
		{name: "no addresses known", netnsV6: false, wantAsked: true},
		{name: "netns unreadable", netnsErr: errNetns, wantAsked: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			gotV4, gotV6, err := Families(tc.dualStack, tc.addrs, func() (bool, error) {
				asked = true
				return tc.netnsV6, tc.netnsErr
			})
			if (err != nil) != tc.wantErr || asked != tc.wantAsked {
				t.Fatalf("err=%v asked=%v, want err=%v asked=%v", err, asked, tc.wantErr, tc.wantAsked)
			}
			if err == nil && (!gotV4 || gotV6 != tc.wantV6) {
				t.Errorf("v4=%v v6=%v, want v4=true v6=%v", gotV4, gotV6, tc.wantV6)
			}
		})
	}
}
