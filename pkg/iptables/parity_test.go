package iptables_test

import (
	"net/netip"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
)

// Upstream's goldens for these cases (istio/istio
// tools/istio-iptables/pkg/capture/testdata: basic-exclude-nic,
// kube-virt-interfaces, ipnets-with-kube-virt-interfaces; and
// cni/pkg/plugin/testdata/dns.txt), written the way iptables-save prints
// them: options in its order, -m tcp/-m udp, --to-ports. Our RETURN rules
// in built-in chains also carry the istio-cni tag.
const (
	upstreamHead = `-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
`
	upstreamExcludeNIC = `-A PREROUTING -i not-istio-nic -m comment --comment istio-cni -j RETURN
-A OUTPUT -o not-istio-nic -m comment --comment istio-cni -j RETURN
` + upstreamHead
	upstreamKubeVirt = upstreamHead + `-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A PREROUTING -i eth2 -j ISTIO_REDIRECT
-A PREROUTING -i eth1 -j ISTIO_REDIRECT
-A PREROUTING -i eth2 -m comment --comment istio-cni -j RETURN
-A PREROUTING -i eth1 -m comment --comment istio-cni -j RETURN
`
	upstreamKubeVirtIPNets = upstreamHead + `-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT
-A PREROUTING -d 10.0.0.0/8 -i eth2 -j ISTIO_REDIRECT
-A PREROUTING -d 10.0.0.0/8 -i eth1 -j ISTIO_REDIRECT
-A PREROUTING -i eth2 -m comment --comment istio-cni -j RETURN
-A PREROUTING -i eth1 -m comment --comment istio-cni -j RETURN
`
	upstreamDNS = `-A ISTIO_INBOUND -p tcp -m tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp -m tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp -m tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -p tcp -m tcp --dport 15020 -j RETURN
-A ISTIO_OUTPUT -p udp -m udp --dport 15020 -j RETURN
-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m multiport ! --dports 53,15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -p tcp -m tcp ! --dport 53 -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -p tcp -m tcp ! --dport 53 -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS
-A ISTIO_OUTPUT_DNS -p tcp -m tcp --dport 53 -j REDIRECT --to-ports 15053
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -j REDIRECT --to-ports 15053
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
*raw
:OUTPUT ACCEPT [0:0]
:PREROUTING ACCEPT [0:0]
:ISTIO_OUTPUT_DNS - [0:0]
:ISTIO_INBOUND - [0:0]
-A OUTPUT -j ISTIO_OUTPUT_DNS
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1
-A ISTIO_OUTPUT_DNS -p udp -m udp --sport 15053 -m owner --uid-owner 1337 -j CT --zone 2
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -m owner --gid-owner 1337 -j CT --zone 1
-A ISTIO_OUTPUT_DNS -p udp -m udp --sport 15053 -m owner --gid-owner 1337 -j CT --zone 2
-A PREROUTING -j ISTIO_INBOUND
-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -j CT --zone 2
-A ISTIO_INBOUND -p udp -m udp --sport 53 -j CT --zone 1
`
)

// TestUpstreamParityMore holds the interface and DNS cases to upstream's
// listings, so a golden refreshed with -update cannot drift from them.
func TestUpstreamParityMore(t *testing.T) {
	// upstream's test config: no inbound capture, no excluded ports.
	bare := func(f func(*iptables.Spec)) iptables.Spec {
		s := iptables.DefaultSpec()
		s.InboundPorts, s.InboundExclude, s.OutboundExclude = iptables.Ports{}, nil, nil
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name, listing string
		spec          iptables.Spec
	}{
		{"basic-exclude-nic", upstreamExcludeNIC, bare(func(s *iptables.Spec) {
			s.ExcludeInterfaces, s.OutboundIPs = iptablestest.IfNames("not-istio-nic"), iptables.Prefixes{}
		})},
		{"kube-virt-interfaces", upstreamKubeVirt, bare(func(s *iptables.Spec) {
			s.RerouteInterfaces = iptablestest.IfNames("eth1", "eth2")
		})},
		{"ipnets-with-kube-virt-interfaces", upstreamKubeVirtIPNets, bare(func(s *iptables.Spec) {
			s.RerouteInterfaces = iptablestest.IfNames("eth1", "eth2")
			s.OutboundIPs = iptables.Prefixes{List: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		})},
		{"dns", upstreamDNS, func() iptables.Spec { s := iptables.DefaultSpec(); s.DNSCapture = true; return s }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			save := "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:ISTIO_INBOUND - [0:0]\n" +
				":ISTIO_IN_REDIRECT - [0:0]\n:ISTIO_OUTPUT - [0:0]\n:ISTIO_REDIRECT - [0:0]\n"
			if tc.spec.DNSCapture {
				save += ":ISTIO_OUTPUT_DNS - [0:0]\n"
			}
			save += tc.listing
			if !strings.HasSuffix(save, "COMMIT\n") {
				save += "COMMIT\n"
			}
			obs, err := iptables.ParseSave([]byte(save))
			if err != nil {
				t.Fatal(err)
			}
			rs := iptables.BuildFamily(tc.spec, iptables.IPv4)
			if d := iptables.Diff(&rs, obs); len(d) != 0 {
				t.Errorf("differs from upstream:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// upstreamTProxyMangle is the mangle table of upstream's tproxy.golden
// (istio-iptables, capture/testdata), in iptables-save's form, with the
// final order its -I ISTIO_INBOUND 1..3 inserts leave.
const upstreamTProxyMangle = `*mangle
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:ISTIO_DIVERT - [0:0]
:ISTIO_TPROXY - [0:0]
:ISTIO_INBOUND - [0:0]
-A PREROUTING -i not-istio-nic -m comment --comment istio-cni -j RETURN
-A OUTPUT -o not-istio-nic -m comment --comment istio-cni -j RETURN
-A ISTIO_DIVERT -j MARK --set-xmark 0x539/0xffffffff
-A ISTIO_DIVERT -j ACCEPT
-A ISTIO_TPROXY ! -d 127.0.0.1/32 -p tcp -j TPROXY --on-port 15006 --on-ip 0.0.0.0 --tproxy-mark 0x539/0xffffffff
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp -m mark --mark 0x539 -j RETURN
-A ISTIO_INBOUND -s 127.0.0.6/32 -i lo -p tcp -j RETURN
-A ISTIO_INBOUND -i lo -p tcp -m mark ! --mark 0x53a -j RETURN
-A ISTIO_INBOUND -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ISTIO_DIVERT
-A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY
-A PREROUTING -p tcp -m mark --mark 0x539 -m comment --comment istio-cni -j CONNMARK --save-mark --nfmask 0xffffffff --ctmask 0xffffffff
-A OUTPUT -o lo -p tcp -m mark --mark 0x539 -m comment --comment istio-cni -j RETURN
-A OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --uid-owner 1337 -m comment --comment istio-cni -j MARK --set-xmark 0x53a/0xffffffff
-A OUTPUT ! -d 127.0.0.1/32 -o lo -p tcp -m owner --gid-owner 1337 -m comment --comment istio-cni -j MARK --set-xmark 0x53a/0xffffffff
-A OUTPUT -p tcp -m connmark --mark 0x539 -m comment --comment istio-cni -j CONNMARK --restore-mark --nfmask 0xffffffff --ctmask 0xffffffff
COMMIT
`

// TestUpstreamParityTProxy holds the TPROXY mangle table to upstream's
// (the nat table is REDIRECT mode's minus the inbound jump, covered by the
// goldens).
func TestUpstreamParityTProxy(t *testing.T) {
	spec := iptables.DefaultSpec()
	spec.TProxy, spec.InboundExclude = true, nil
	spec.ExcludeInterfaces = iptablestest.IfNames("not-istio-nic")
	obs, err := iptables.ParseSave([]byte(upstreamTProxyMangle))
	if err != nil {
		t.Fatal(err)
	}
	rs := iptables.BuildFamily(spec, iptables.IPv4)
	mangle := tableOf(&rs, iptables.TableMangle)
	if d := iptables.Diff(&mangle, obs); len(d) != 0 {
		t.Errorf("mangle differs from upstream:\n%s", strings.Join(d, "\n"))
	}
	if rs.Route == nil || *rs.Route != (iptables.PolicyRoute{Mark: 1337, Table: 133}) {
		t.Errorf("policy route %+v, want fwmark 1337 table 133", rs.Route)
	}
}

// upstreamDropInvalidMangle is the mangle table of upstream's
// drop-invalid.golden (istio-iptables, capture/testdata), in
// iptables-save's form.
const upstreamDropInvalidMangle = `*mangle
:PREROUTING ACCEPT [0:0]
:ISTIO_DROP - [0:0]
-A PREROUTING -m conntrack --ctstate INVALID -j ISTIO_DROP
-A ISTIO_DROP -j DROP
COMMIT
`

// TestUpstreamParityDropInvalid holds INVALID_DROP's mangle table to
// upstream's, in both families (the nat table is the default's).
func TestUpstreamParityDropInvalid(t *testing.T) {
	spec := iptables.DefaultSpec()
	spec.InvalidDrop = true
	obs, err := iptables.ParseSave([]byte(upstreamDropInvalidMangle))
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		rs := iptables.BuildFamily(spec, fam)
		mangle := tableOf(&rs, iptables.TableMangle)
		if d := iptables.Diff(&mangle, obs); len(d) != 0 {
			t.Errorf("%s mangle differs from upstream:\n%s", fam, strings.Join(d, "\n"))
		}
		def := iptables.BuildFamily(iptables.DefaultSpec(), fam)
		if nat := len(rs.Rules) - len(mangle.Rules); nat != len(def.Rules) {
			t.Errorf("%s: %d nat rules, want the default's %d", fam, nat, len(def.Rules))
		}
	}
}

// tableOf is rs's chains and rules in one table.
func tableOf(rs *iptables.Ruleset, table string) iptables.Ruleset {
	out := iptables.Ruleset{Family: rs.Family}
	for _, c := range rs.Chains {
		if c.Table == table {
			out.Chains = append(out.Chains, c)
		}
	}
	for _, r := range rs.Rules {
		if r.Table == table {
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}
