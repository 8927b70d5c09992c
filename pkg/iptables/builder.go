package iptables

import (
	"net/netip"
	"slices"
)

// ChainID names a chain in a table.
type ChainID struct {
	Table string
	Name  string
}

// Ruleset is everything one address family must hold for a pod: the chains we
// own and every rule, in order, including the jumps from built-in chains.
type Ruleset struct {
	Family Family
	Chains []ChainID
	Rules  []Rule
	// Route is the policy routing the rules need (TPROXY), or nil.
	Route *PolicyRoute
}

// Model is what a pod's network namespace must hold, one ruleset per family
// in use. A nil ruleset means that family is left alone.
type Model struct {
	V4 *Ruleset
	V6 *Ruleset
	// Spec is what the rulesets were built from: native nftables
	// (pkg/iptables/nftables) builds its one ruleset for both families from it.
	Spec Spec
}

// Rulesets returns the non-nil rulesets, IPv4 first.
func (m Model) Rulesets() []*Ruleset {
	var out []*Ruleset
	for _, rs := range []*Ruleset{m.V4, m.V6} {
		if rs != nil {
			out = append(out, rs)
		}
	}
	return out
}

// Build returns the model for a spec: the families are those the pod has
// addresses in.
func Build(spec Spec, v4, v6 bool) Model {
	m := Model{Spec: spec}
	if v4 {
		rs := BuildFamily(spec, IPv4)
		m.V4 = &rs
	}
	if v6 {
		rs := BuildFamily(spec, IPv6)
		m.V6 = &rs
	}
	return m
}

// familyAddrs are the per-family addresses the sidecar rules refer to.
type familyAddrs struct {
	// passthrough is the source Envoy binds for inbound passthrough
	// connections to the app (127.0.0.6, ::6).
	passthrough netip.Prefix
	loopback    netip.Prefix
}

var (
	addrsV4 = familyAddrs{netip.MustParsePrefix("127.0.0.6/32"), netip.MustParsePrefix("127.0.0.1/32")}
	addrsV6 = familyAddrs{netip.MustParsePrefix("::6/128"), netip.MustParsePrefix("::1/128")}
)

func addrsOf(f Family) familyAddrs {
	if f == IPv6 {
		return addrsV6
	}
	return addrsV4
}

// BuildFamily renders a spec into the rules of one family. The order is
// istio-iptables' for REDIRECT mode; each rule says why it is there.
func BuildFamily(spec Spec, fam Family) Ruleset {
	b := &builder{rs: Ruleset{Family: fam}, fam: fam, addrs: addrsOf(fam)}
	for _, c := range []string{ChainInbound, ChainRedirect, ChainInRedirect, ChainOutput} {
		b.rs.Chains = append(b.rs.Chains, ChainID{TableNat, c})
	}
	if spec.DNSCapture {
		b.rs.Chains = append(b.rs.Chains, ChainID{TableNat, ChainOutputDNS},
			ChainID{TableRaw, ChainOutputDNS}, ChainID{TableRaw, ChainInbound})
	}
	if spec.InvalidDrop {
		b.rs.Chains = append(b.rs.Chains, ChainID{TableMangle, ChainDrop})
	}
	tproxy := spec.TProxy && !spec.InboundPorts.None()
	if tproxy {
		b.rs.Chains = append(b.rs.Chains, ChainID{TableMangle, ChainDivert},
			ChainID{TableMangle, ChainTProxy}, ChainID{TableMangle, ChainInbound})
		b.rs.Route = &PolicyRoute{Mark: spec.TProxyMark, Table: spec.TProxyTable}
	}
	// The tunnel (HBONE) port is the proxy's own inbound listener.
	b.add(Rule{Chain: ChainInbound, Proto: TCP, Matches: dport(TCP, spec.TunnelPort, false), Target: Return{}})
	// The two redirect chains send captured traffic to the proxy's listeners.
	b.add(Rule{Chain: ChainRedirect, Proto: TCP, Target: Redirect{spec.OutboundPort}})
	b.add(Rule{Chain: ChainInRedirect, Proto: TCP, Target: Redirect{spec.InboundPort}})
	b.interfaces(spec)
	if spec.InvalidDrop {
		// Out-of-window packets are dropped, not answered with a reset,
		// before any capture: istio-iptables' --drop-invalid.
		b.addMangle(Rule{Chain: Prerouting, Matches: []Match{InvalidState{}}, Target: Jump{ChainDrop}})
		b.addMangle(Rule{Chain: ChainDrop, Target: Drop{}})
	}
	b.inbound(spec)
	b.outbound(spec)
	if spec.DNSCapture {
		b.dnsZones(spec)
	}
	return b.rs
}

// interfaces puts the interface rules first in PREROUTING and OUTPUT, in
// the order istio-iptables leaves them: reroutes to ISTIO_REDIRECT (for the
// captured destinations), the rerouted interfaces' RETURN, then the
// excluded interfaces' RETURN. istio-iptables inserts the first two at the
// top one by one, hence the reversed order.
func (b *builder) interfaces(spec Spec) {
	var redirects []Rule
	add := func(iface IfName, dst netip.Prefix) {
		redirects = append(redirects, Rule{Chain: Prerouting, Dst: Addr{Prefix: dst}, In: Iface{Name: iface}, Target: Jump{ChainRedirect}})
	}
	if spec.OutboundIPs.All {
		for _, iface := range spec.RerouteInterfaces {
			add(iface, netip.Prefix{})
		}
	} else {
		for _, p := range spec.OutboundIPs.List {
			if b.inFamily(p) {
				for _, iface := range spec.RerouteInterfaces {
					add(iface, p.Masked())
				}
			}
		}
	}
	for _, r := range slices.Backward(redirects) {
		b.add(r)
	}
	for _, iface := range slices.Backward(spec.RerouteInterfaces) {
		b.add(Rule{Chain: Prerouting, In: Iface{Name: iface}, Matches: []Match{Tag{}}, Target: Return{}})
	}
	for _, iface := range spec.ExcludeInterfaces {
		b.add(Rule{Chain: Prerouting, In: Iface{Name: iface}, Matches: []Match{Tag{}}, Target: Return{}})
	}
	for _, iface := range spec.ExcludeInterfaces {
		b.add(Rule{Chain: Output, Out: Iface{Name: iface}, Matches: []Match{Tag{}}, Target: Return{}})
	}
	if spec.TProxy && !spec.InboundPorts.None() {
		for _, iface := range spec.ExcludeInterfaces {
			b.addMangle(Rule{Chain: Prerouting, In: Iface{Name: iface}, Matches: []Match{Tag{}}, Target: Return{}})
			b.addMangle(Rule{Chain: Output, Out: Iface{Name: iface}, Matches: []Match{Tag{}}, Target: Return{}})
		}
	}
}

type builder struct {
	rs    Ruleset
	fam   Family
	addrs familyAddrs
}

func (b *builder) add(r Rule) {
	r.Table = TableNat
	b.rs.Rules = append(b.rs.Rules, r)
}

func (b *builder) addMangle(r Rule) {
	r.Table = TableMangle
	b.rs.Rules = append(b.rs.Rules, r)
}

func (b *builder) addRaw(r Rule) {
	r.Table = TableRaw
	b.rs.Rules = append(b.rs.Rules, r)
}

func dport(p Proto, port uint16, not bool) []Match {
	return []Match{DPort{Proto: p, Port: port, Not: not}}
}

func owner(k OwnerKind, id uint32, not bool) []Match {
	return []Match{Owner{Kind: k, ID: id, Not: not}}
}

// inbound captures TCP arriving at the pod. With no inbound ports there is no
// jump from PREROUTING at all.
func (b *builder) inbound(spec Spec) {
	if spec.InboundPorts.None() {
		return
	}
	if spec.TProxy {
		b.inboundTProxy(spec)
		return
	}
	b.add(Rule{Chain: Prerouting, Proto: TCP, Target: Jump{ChainInbound}})
	if spec.InboundPorts.All {
		for _, p := range spec.InboundExclude {
			b.add(Rule{Chain: ChainInbound, Proto: TCP, Matches: dport(TCP, p, false), Target: Return{}})
		}
		b.add(Rule{Chain: ChainInbound, Proto: TCP, Target: Jump{ChainInRedirect}})
		return
	}
	for _, p := range spec.InboundPorts.List {
		b.add(Rule{Chain: ChainInbound, Proto: TCP, Matches: dport(TCP, p, false), Target: Jump{ChainInRedirect}})
	}
}

// outbound captures what the pod sends. All traffic enters ISTIO_OUTPUT; the
// chain returns early for what must not be captured.
func (b *builder) outbound(spec Spec) {
	lo := Iface{Name: Loopback}
	b.add(Rule{Chain: Output, Target: Jump{ChainOutput}})
	// Excluded ports go direct, for TCP and for UDP.
	for _, p := range spec.OutboundExclude {
		b.add(Rule{Chain: ChainOutput, Proto: TCP, Matches: dport(TCP, p, false), Target: Return{}})
		b.add(Rule{Chain: ChainOutput, Proto: UDP, Matches: dport(UDP, p, false), Target: Return{}})
	}
	// Envoy's inbound passthrough connects to the app from 127.0.0.6 (::6).
	b.add(Rule{Chain: ChainOutput, Src: Addr{Prefix: b.addrs.passthrough}, Out: lo, Target: Return{}})
	loopbackIncluded := includesLoopback(spec.OutboundIPs)
	for _, o := range proxyOwners(spec) {
		// The proxy calling a service VIP that resolves back to this pod:
		// send it through inbound capture (app -> Envoy -> Envoy -> app).
		// With DNS capture the proxy's own DNS over lo is left alone (uid
		// only, as istio-iptables does).
		notPorts := dport(TCP, spec.TunnelPort, true)
		if spec.DNSCapture && o.kind == UID {
			notPorts = []Match{NotDPorts{[]uint16{DNSPort, spec.TunnelPort}}}
		}
		b.add(Rule{Chain: ChainOutput, Dst: Addr{Prefix: b.addrs.loopback, Not: true}, Out: lo, Proto: TCP,
			Matches: append(notPorts, owner(o.kind, o.id, false)...),
			Target:  Jump{ChainInRedirect}})
		// The app talking to itself over lo is not captured, unless the
		// user explicitly captures loopback destinations; with DNS capture,
		// its DNS over lo is.
		switch {
		case loopbackIncluded:
		case spec.DNSCapture:
			b.add(Rule{Chain: ChainOutput, Out: lo, Proto: TCP,
				Matches: append(dport(TCP, DNSPort, true), owner(o.kind, o.id, true)...), Target: Return{}})
		default:
			b.add(Rule{Chain: ChainOutput, Out: lo, Matches: owner(o.kind, o.id, true), Target: Return{}})
		}
		// The proxy's own traffic is never captured again (no loops).
		b.add(Rule{Chain: ChainOutput, Matches: owner(o.kind, o.id, false), Target: Return{}})
	}
	if spec.DNSCapture {
		b.dnsRedirect(spec)
	}
	// Traffic to localhost is the app talking to the proxy or to itself.
	b.add(Rule{Chain: ChainOutput, Dst: Addr{Prefix: b.addrs.loopback}, Target: Return{}})
	for _, p := range spec.OutboundIPExclude {
		if b.inFamily(p) {
			b.add(Rule{Chain: ChainOutput, Dst: Addr{Prefix: p.Masked()}, Target: Return{}})
		}
	}
	for _, p := range spec.OutboundPorts {
		b.add(Rule{Chain: ChainOutput, Proto: TCP, Matches: dport(TCP, p, false), Target: Jump{ChainRedirect}})
	}
	if spec.OutboundIPs.All {
		b.add(Rule{Chain: ChainOutput, Target: Jump{ChainRedirect}})
		return
	}
	for _, p := range spec.OutboundIPs.List {
		if b.inFamily(p) {
			b.add(Rule{Chain: ChainOutput, Dst: Addr{Prefix: p.Masked()}, Target: Jump{ChainRedirect}})
		}
	}
}

// proxyOwner is one way to recognise the proxy's own sockets.
type proxyOwner struct {
	kind OwnerKind
	id   uint32
}

// proxyOwners: its uid, then its gid, the order of every per-owner rule.
func proxyOwners(spec Spec) []proxyOwner {
	return []proxyOwner{{UID, spec.ProxyUID}, {GID, spec.ProxyGID}}
}

func (b *builder) inFamily(p netip.Prefix) bool {
	return p.Addr().Is4() == (b.fam == IPv4)
}

func includesLoopback(p Prefixes) bool {
	for _, pfx := range p.List {
		if pfx.Addr().IsLoopback() {
			return true
		}
	}
	return false
}

// dnsRedirect sends the app's DNS, to any server, to the proxy's DNS
// listener. The proxy's own queries returned earlier in ISTIO_OUTPUT; the
// UDP exceptions below repeat that, as istio-iptables does.
func (b *builder) dnsRedirect(spec Spec) {
	b.add(Rule{Chain: ChainOutput, Target: Jump{ChainOutputDNS}})
	b.add(Rule{Chain: ChainOutputDNS, Proto: TCP, Matches: dport(TCP, DNSPort, false), Target: Redirect{ProxyDNSPort}})
	for _, o := range proxyOwners(spec) {
		b.add(Rule{Chain: ChainOutputDNS, Proto: UDP, Matches: append(dport(UDP, DNSPort, false), owner(o.kind, o.id, false)...), Target: Return{}})
	}
	b.add(Rule{Chain: ChainOutputDNS, Proto: UDP, Matches: dport(UDP, DNSPort, false), Target: Redirect{ProxyDNSPort}})
}

// dnsZones keeps the proxy's upstream DNS flows apart from the app's in
// conntrack: the proxy's queries and their replies in zone 1, the app's
// queries and the proxy's answers from its DNS port in zone 2. Without
// zones the two flows share a 5-tuple after the redirect and collide.
func (b *builder) dnsZones(spec Spec) {
	b.addRaw(Rule{Chain: Output, Target: Jump{ChainOutputDNS}})
	for _, o := range proxyOwners(spec) {
		b.addRaw(Rule{Chain: ChainOutputDNS, Proto: UDP, Matches: append(dport(UDP, DNSPort, false), owner(o.kind, o.id, false)...), Target: CT{1}})
		b.addRaw(Rule{Chain: ChainOutputDNS, Proto: UDP, Matches: append([]Match{SPort{UDP, ProxyDNSPort}}, owner(o.kind, o.id, false)...), Target: CT{2}})
	}
	b.addRaw(Rule{Chain: ChainOutputDNS, Proto: UDP, Matches: dport(UDP, DNSPort, false), Target: CT{2}})
	b.addRaw(Rule{Chain: Prerouting, Target: Jump{ChainInbound}})
	b.addRaw(Rule{Chain: ChainInbound, Proto: UDP, Matches: []Match{SPort{UDP, DNSPort}}, Target: CT{1}})
}

// inboundTProxy captures inbound TCP in the mangle table, in the order
// istio-iptables leaves it: packets TPROXY'd to the inbound port carry the
// mark (policy routing delivers them to lo); the mark is saved on the
// connection and restored on the proxy's replies. The proxy's own traffic
// to the app over lo is marked OutboundMark so that it is not captured
// inbound again.
func (b *builder) inboundTProxy(spec Spec) {
	tag := func(ms ...Match) []Match { return append(ms, Tag{}) }
	lo := Iface{Name: Loopback}
	b.addMangle(Rule{Chain: ChainDivert, Target: SetMark{spec.TProxyMark}})
	b.addMangle(Rule{Chain: ChainDivert, Target: Accept{}})
	b.addMangle(Rule{Chain: ChainTProxy, Dst: Addr{Prefix: b.addrs.loopback, Not: true}, Proto: TCP,
		Target: TProxy{Port: spec.InboundPort, Mark: spec.TProxyMark, V6: b.fam == IPv6}})
	b.addMangle(Rule{Chain: Prerouting, Proto: TCP, Target: Jump{ChainInbound}})
	// Already diverted, Envoy's passthrough, and lo traffic not from the
	// proxy to the app: not captured.
	b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Matches: []Match{Mark{Value: spec.TProxyMark}}, Target: Return{}})
	b.addMangle(Rule{Chain: ChainInbound, Src: Addr{Prefix: b.addrs.passthrough}, In: lo, Proto: TCP, Target: Return{}})
	b.addMangle(Rule{Chain: ChainInbound, In: lo, Proto: TCP, Matches: []Match{Mark{Value: OutboundMark, Not: true}}, Target: Return{}})
	if spec.InboundPorts.All {
		for _, p := range spec.InboundExclude {
			b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Matches: dport(TCP, p, false), Target: Return{}})
		}
		b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Matches: []Match{Established{}}, Target: Jump{ChainDivert}})
		b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Target: Jump{ChainTProxy}})
	} else {
		for _, p := range spec.InboundPorts.List {
			b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Matches: append(dport(TCP, p, false), Established{}), Target: Jump{ChainDivert}})
			b.addMangle(Rule{Chain: ChainInbound, Proto: TCP, Matches: dport(TCP, p, false), Target: Jump{ChainTProxy}})
		}
	}
	b.addMangle(Rule{Chain: Prerouting, Proto: TCP, Matches: tag(Mark{Value: spec.TProxyMark}), Target: ConnMarkSave{}})
	b.addMangle(Rule{Chain: Output, Out: lo, Proto: TCP, Matches: tag(Mark{Value: spec.TProxyMark}), Target: Return{}})
	for _, o := range proxyOwners(spec) {
		b.addMangle(Rule{Chain: Output, Dst: Addr{Prefix: b.addrs.loopback, Not: true}, Out: lo, Proto: TCP,
			Matches: tag(owner(o.kind, o.id, false)...), Target: SetMark{OutboundMark}})
	}
	b.addMangle(Rule{Chain: Output, Proto: TCP, Matches: tag(ConnMark{spec.TProxyMark}), Target: ConnMarkRestore{}})
}
