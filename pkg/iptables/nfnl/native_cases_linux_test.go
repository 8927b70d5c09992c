package nfnl_test

import (
	"net/netip"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// nativeCase is a ruleset and the nft text that makes it: upstream's
// golden, or, for specs upstream has none of, the model's own commands.
type nativeCase struct {
	name   string
	rs     nftables.Ruleset
	golden string // a file for nft -f; "" to load rs.Commands()
}

// nativeCases are pkg/iptables/nftables' upstream cases (upstream_test.go, which
// holds each to its golden) and the default spec's variants.
func nativeCases(t *testing.T) []nativeCase {
	base := iptables.DefaultSpec()
	base.InboundPorts, base.InboundExclude, base.OutboundExclude = iptables.Ports{}, nil, nil
	base.OutboundIPs = iptables.Prefixes{}
	ports := func(s *iptables.Spec) { s.InboundPorts.List = []uint16{4000, 5000} }
	ipnets := func(s *iptables.Spec) { s.OutboundIPs.List = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }
	virt := func(names ...string) func(*iptables.Spec) {
		return func(s *iptables.Spec) { s.RerouteInterfaces = iptablestest.IfNames(names...) }
	}
	upstream := []struct {
		name string
		v6   bool
		set  []func(*iptables.Spec)
	}{
		{"empty", false, nil},
		{"ipv6-empty-inbound-ports", true, nil},
		{"ipv6-inbound-ports", true, []func(*iptables.Spec){ports}},
		{"ipv6-virt-interfaces", true, []func(*iptables.Spec){ports, virt("eth0", "eth1")}},
		{"ipv6-ipnets", true, []func(*iptables.Spec){ports, virt("eth0", "eth1"), func(s *iptables.Spec) {
			s.InboundExclude = []uint16{6000, 7000}
			s.OutboundIPExclude = []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}
			s.OutboundIPs.List = s.OutboundIPExclude
		}}},
		{"ipv6-outbound-ports", true, []func(*iptables.Spec){func(s *iptables.Spec) { s.OutboundPorts = []uint16{32000, 31000} }}},
		{"kube-virt-interfaces", false, []func(*iptables.Spec){virt("eth1", "eth2"), func(s *iptables.Spec) { s.OutboundIPs.All = true }}},
		{"ipnets", false, []func(*iptables.Spec){ipnets}},
		{"ipnets-with-kube-virt-interfaces", false, []func(*iptables.Spec){virt("eth1", "eth2"), ipnets}},
		{"inbound-ports-include", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.InboundPorts.List = []uint16{32000, 31000} }}},
		{"inbound-ports-wildcard", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.InboundPorts.All = true }}},
		{"inbound-ports-tproxy", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.InboundPorts.List, s.TProxy = []uint16{32000, 31000}, true }}},
		{"inbound-ports-wildcard-tproxy", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.InboundPorts.All, s.TProxy = true, true }}},
		{"inbound-ports-empty-tproxy", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.TProxy = true }}},
		{"outbound-ports-include", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.OutboundPorts = []uint16{32000, 31000} }}},
		{"basic-exclude-nic", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.ExcludeInterfaces = iptablestest.IfNames("not-istio-nic") }}},
		{"drop-invalid", false, []func(*iptables.Spec){func(s *iptables.Spec) { s.InvalidDrop = true }}},
	}
	dir := iptablestest.UpstreamNftablesGoldens(t)
	var out []nativeCase
	for _, u := range upstream {
		s := base
		for _, f := range u.set {
			f(&s)
		}
		out = append(out, nativeCase{u.name, nftables.Build(s, u.v6), filepath.Join(dir, u.name+".golden")})
	}
	for name, set := range map[string]func(*iptables.Spec){
		"default-dns":     func(s *iptables.Spec) { s.DNSCapture = true },
		"default-tproxy":  func(s *iptables.Spec) { s.TProxy = true },
		"default-invalid": func(s *iptables.Spec) { s.InvalidDrop = true },
		"default-all": func(s *iptables.Spec) {
			s.DNSCapture, s.TProxy, s.InvalidDrop = true, true, true
			s.OutboundIPExclude = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("fd10::/61")}
		},
	} {
		for _, v6 := range []bool{false, true} {
			s := iptables.DefaultSpec()
			set(&s)
			out = append(out, nativeCase{name: name + map[bool]string{false: "-v4", true: "-v6"}[v6], rs: nftables.Build(s, v6)})
		}
	}
	return out
}
