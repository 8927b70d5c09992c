// Package iptablestest holds the specs the rule model is tested with: each
// traffic annotation's shape of rules. The golden tests render them; the
// real-namespace tests program them with both iptables backends, which proves
// every rule reads back from iptables-save exactly as it was rendered.
package iptablestest

import (
	"net/netip"

	"istio-cni.local/istio-cni/pkg/iptables"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s))
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// IfNames parses interface names that are known to be valid; it panics on
// a bad one (a test's own typo).
func IfNames(s ...string) []iptables.IfName {
	out := make([]iptables.IfName, 0, len(s))
	for _, n := range s {
		name, err := iptables.ParseIfName(n)
		if err != nil {
			panic(err)
		}
		out = append(out, name)
	}
	return out
}

// Specs are the annotation cases of istio-cni's sidecar mode, by name.
func Specs() map[string]iptables.Spec {
	with := func(f func(*iptables.Spec)) iptables.Spec { s := iptables.DefaultSpec(); f(&s); return s }
	return map[string]iptables.Spec{
		"default": iptables.DefaultSpec(),
		"include-inbound-ports": with(func(s *iptables.Spec) {
			s.InboundPorts = iptables.Ports{List: []uint16{80, 8080}}
		}),
		"no-inbound": with(func(s *iptables.Spec) { s.InboundPorts = iptables.Ports{} }),
		"exclude-inbound-ports": with(func(s *iptables.Spec) {
			s.InboundExclude = []uint16{22, 15020, 15021, 15090}
		}),
		"outbound-ip-ranges": with(func(s *iptables.Spec) {
			s.OutboundIPs = iptables.Prefixes{List: prefixes("10.0.0.0/8", "fd00::/8")}
			s.OutboundIPExclude = prefixes("10.96.0.1/32", "fd00:1::/64")
		}),
		"exclude-outbound-ip-ranges": with(func(s *iptables.Spec) {
			s.OutboundIPExclude = prefixes("169.254.169.254/32", "192.168.0.0/16")
		}),
		// A /0 is "every address": iptables-save prints no -d for it.
		"zero-length-prefixes": with(func(s *iptables.Spec) {
			s.OutboundIPs = iptables.Prefixes{List: prefixes("0.0.0.0/0", "::/0")}
			s.OutboundIPExclude = prefixes("10.0.0.0/8")
		}),
		"outbound-ports": with(func(s *iptables.Spec) {
			s.OutboundPorts = []uint16{3306}
			s.OutboundExclude = []uint16{5432, 15020}
		}),
		"loopback-included": with(func(s *iptables.Spec) {
			s.OutboundIPs = iptables.Prefixes{List: prefixes("127.0.0.0/8")}
		}),
		"no-outbound-ips": with(func(s *iptables.Spec) { s.OutboundIPs = iptables.Prefixes{} }),
		"custom-ids":      with(func(s *iptables.Spec) { s.ProxyUID, s.ProxyGID = 1000, 2000 }),
		"exclude-interfaces": with(func(s *iptables.Spec) {
			s.ExcludeInterfaces = IfNames("not-istio-nic", "net1")
		}),
		"dns-capture": with(func(s *iptables.Spec) { s.DNSCapture = true }),
		"dns-capture-custom-ids": with(func(s *iptables.Spec) {
			s.DNSCapture = true
			s.ProxyUID, s.ProxyGID = 1000, 2000
		}),
		"tproxy":       with(func(s *iptables.Spec) { s.TProxy = true }),
		"drop-invalid": with(func(s *iptables.Spec) { s.InvalidDrop = true }),
		"drop-invalid-tproxy": with(func(s *iptables.Spec) {
			s.InvalidDrop, s.TProxy = true, true
			s.ExcludeInterfaces = IfNames("not-istio-nic")
		}),
		"tproxy-ports-and-interfaces": with(func(s *iptables.Spec) {
			s.TProxy = true
			s.TProxyMark, s.TProxyTable = 0x1000, 200
			s.InboundPorts = iptables.Ports{List: []uint16{80, 8080}}
			s.ExcludeInterfaces = IfNames("not-istio-nic")
		}),
		"reroute-interfaces": with(func(s *iptables.Spec) {
			s.RerouteInterfaces = IfNames("eth1", "eth2")
		}),
		// Rerouted for the captured ranges only, per family.
		"reroute-interfaces-ip-ranges": with(func(s *iptables.Spec) {
			s.RerouteInterfaces = IfNames("eth1", "eth2")
			s.OutboundIPs = iptables.Prefixes{List: prefixes("10.0.0.0/8", "172.16.0.0/12", "fd00::/8")}
			s.ExcludeInterfaces = IfNames("net1")
		}),
	}
}

// ParitySpecs are Specs plus prefixes of every shape (whole bytes, not
// whole bytes, host routes) and a ruleset of 400 ports: what the kernel
// writers are held to iptables-restore with.
func ParitySpecs() map[string]iptables.Spec {
	specs := Specs()
	s := iptables.DefaultSpec()
	s.OutboundIPs = iptables.Prefixes{List: prefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.1.7/32", "100.64.0.0/10",
		"fd00::/8", "2001:db8::/33", "2001:db8:1::5/128")}
	s.OutboundIPExclude = prefixes("10.96.0.0/12", "fd10::/64")
	specs["prefix-shapes"] = s
	// More netlink messages than a default socket buffer holds replies for.
	many := iptables.DefaultSpec()
	many.InboundPorts = iptables.Ports{}
	for p := uint16(1000); p < 1400; p++ {
		many.InboundPorts.List = append(many.InboundPorts.List, p)
	}
	specs["many-ports"] = many
	return specs
}
