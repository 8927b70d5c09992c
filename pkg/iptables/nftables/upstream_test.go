package nftables_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// upstreamBase is istio-nftables' test config (capture/run_test.go
// constructTestConfig): the default ports and ids, nothing captured
// inbound, no destinations captured outbound, no excluded ports.
func upstreamBase() iptables.Spec {
	s := iptables.DefaultSpec()
	s.InboundPorts, s.InboundExclude, s.OutboundExclude = iptables.Ports{}, nil, nil
	s.OutboundIPs = iptables.Prefixes{}
	return s
}

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// upstreamCases are istio-nftables' cases (capture/run_test.go) that a
// sidecar's spec can say, each with its config. The others need what the
// CNI never sets: several proxy uids, DNS servers named one by one, owner
// groups, another loopback CIDR.
var upstreamCases = []struct {
	name string
	v6   bool
	set  func(*iptables.Spec)
}{
	{"empty", false, func(*iptables.Spec) {}},
	{"ipv6-empty-inbound-ports", true, func(*iptables.Spec) {}},
	{"ipv6-inbound-ports", true, func(s *iptables.Spec) { s.InboundPorts.List = []uint16{4000, 5000} }},
	{"ipv6-virt-interfaces", true, func(s *iptables.Spec) {
		s.InboundPorts.List = []uint16{4000, 5000}
		s.RerouteInterfaces = iptablestest.IfNames("eth0", "eth1")
	}},
	{"ipv6-ipnets", true, func(s *iptables.Spec) {
		s.InboundPorts.List = []uint16{4000, 5000}
		s.InboundExclude = []uint16{6000, 7000}
		s.RerouteInterfaces = iptablestest.IfNames("eth0", "eth1")
		s.OutboundIPExclude = prefixes("2001:db8::/32")
		s.OutboundIPs.List = prefixes("2001:db8::/32")
	}},
	{"ipv6-outbound-ports", true, func(s *iptables.Spec) { s.OutboundPorts = []uint16{32000, 31000} }},
	{"kube-virt-interfaces", false, func(s *iptables.Spec) {
		s.RerouteInterfaces = iptablestest.IfNames("eth1", "eth2")
		s.OutboundIPs.All = true
	}},
	{"ipnets", false, func(s *iptables.Spec) { s.OutboundIPs.List = prefixes("10.0.0.0/8") }},
	{"ipnets-with-kube-virt-interfaces", false, func(s *iptables.Spec) {
		s.RerouteInterfaces = iptablestest.IfNames("eth1", "eth2")
		s.OutboundIPs.List = prefixes("10.0.0.0/8")
	}},
	{"inbound-ports-include", false, func(s *iptables.Spec) { s.InboundPorts.List = []uint16{32000, 31000} }},
	{"inbound-ports-wildcard", false, func(s *iptables.Spec) { s.InboundPorts.All = true }},
	{"inbound-ports-tproxy", false, func(s *iptables.Spec) {
		s.InboundPorts.List, s.TProxy = []uint16{32000, 31000}, true
	}},
	{"inbound-ports-wildcard-tproxy", false, func(s *iptables.Spec) { s.InboundPorts.All, s.TProxy = true, true }},
	{"inbound-ports-empty-tproxy", false, func(s *iptables.Spec) { s.TProxy = true }},
	{"outbound-ports-include", false, func(s *iptables.Spec) { s.OutboundPorts = []uint16{32000, 31000} }},
	{"basic-exclude-nic", false, func(s *iptables.Spec) { s.ExcludeInterfaces = iptablestest.IfNames("not-istio-nic") }},
	{"drop-invalid", false, func(s *iptables.Spec) { s.InvalidDrop = true }},
}

// TestUpstreamGoldens holds the ruleset to upstream's own goldens, read
// from the pinned module: the same commands, in the same order.
func TestUpstreamGoldens(t *testing.T) {
	dir := iptablestest.UpstreamNftablesGoldens(t)
	for _, tc := range upstreamCases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, tc.name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			spec := upstreamBase()
			tc.set(&spec)
			rs := nftables.Build(spec, tc.v6)
			if got := rs.Commands(); got != string(want) {
				t.Errorf("differs from upstream's %s.golden:\n%s", tc.name, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff shows the lines of want missing from got (-) and the other
// way round (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d\n- %s\n+ %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}
