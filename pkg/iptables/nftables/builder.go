package nftables

import (
	"net/netip"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// The chains each table may hold, in upstream's order; a table keeps
// those that have rules.
var chainsOf = map[string][]Chain{
	TableNat: {
		{Prerouting, &Base{"nat", "prerouting", -100}},
		{Output, &Base{"nat", "output", -100}},
		{Name: ChainInbound}, {Name: ChainRedirect}, {Name: ChainInRedir}, {Name: ChainOutput}, {Name: ChainOutputDNS},
	},
	TableMangle: {
		{Prerouting, &Base{"filter", "prerouting", -150}},
		{Output, &Base{"route", "output", -150}},
		{Name: ChainDivert}, {Name: ChainTProxy}, {Name: ChainInbound}, {Name: ChainDrop},
	},
	TableRaw: {
		{Prerouting, &Base{"filter", "prerouting", -300}},
		{Output, &Base{"filter", "output", -300}},
		{Name: ChainInbound}, {Name: ChainOutputDNS},
	},
}

// The addresses the rules name, as upstream spells them.
var (
	passthroughV4 = netip.MustParsePrefix("127.0.0.6/32")
	passthroughV6 = netip.MustParsePrefix("::6/128")
	loopbackV4    = netip.MustParsePrefix("127.0.0.1/32")
	loopbackV6    = netip.MustParsePrefix("::1/128")
)

// Of is the native ruleset an iptables model stands for: its spec, with
// IPv6 rules when it has an IPv6 ruleset; a model with no family (a
// sandbox passed through) holds none of our tables.
func Of(m iptables.Model) Ruleset {
	if m.V4 == nil && m.V6 == nil {
		return Ruleset{}
	}
	return Build(m.Spec, m.V6 != nil)
}

// Build returns upstream's native nftables ruleset for a spec. The IPv4
// rules are always there, as upstream writes them; v6 adds the IPv6 ones
// (upstream's EnableIPv6: the pod has an IPv6 address). The order is
// upstream's (istio-nftables' capture.Run); each rule says why it is there.
func Build(spec iptables.Spec, v6 bool) Ruleset {
	b := &builder{v6: v6, rules: map[string][]Rule{}}
	b.interfaces(spec)
	if spec.InvalidDrop {
		// Out-of-window packets are dropped, not answered with a reset.
		b.add(TableMangle, Prerouting, tcp, CtState{}, Counter{}, Jump{ChainDrop})
		b.add(TableMangle, ChainDrop, Counter{}, Drop{})
	}
	// The tunnel (HBONE) port is the proxy's own inbound listener.
	b.add(TableNat, ChainInbound, tcp, dport(spec.TunnelPort), Counter{}, Return{})
	// The two redirect chains send captured traffic to the proxy's listeners.
	b.add(TableNat, ChainRedirect, tcp, Counter{}, Redirect{spec.OutboundPort})
	b.add(TableNat, ChainInRedir, tcp, Counter{}, Redirect{spec.InboundPort})
	b.inbound(spec)
	b.outbound(spec)
	if spec.TProxy {
		b.tproxyMarks(spec)
	}
	var rs Ruleset
	if spec.TProxy && !spec.InboundPorts.None() {
		// Upstream routes TPROXY's mark only when it captures inbound
		// ports (configureTProxyRoutes).
		rs.Route = &iptables.PolicyRoute{Mark: spec.TProxyMark, Table: spec.TProxyTable}
	}
	for _, name := range Tables {
		rules := b.rules[name]
		if len(rules) == 0 {
			continue
		}
		t := Table{Name: name, Rules: rules}
		used := map[string]bool{}
		for _, r := range rules {
			used[r.Chain] = true
		}
		for _, c := range chainsOf[name] {
			if used[c.Name] {
				t.Chains = append(t.Chains, c)
			}
		}
		rs.Tables = append(rs.Tables, t)
	}
	return rs
}

type builder struct {
	v6    bool
	rules map[string][]Rule
}

var tcp = L4Proto{iptables.TCP}

func dport(ports ...uint16) Port { return Port{Proto: iptables.TCP, Ports: ports} }

func (b *builder) add(table, chain string, exprs ...Expr) {
	b.rules[table] = append(b.rules[table], Rule{Chain: chain, Exprs: exprs})
}

// addV6 adds an IPv6 rule when the pod has IPv6 (upstream's
// AppendV6RuleIfSupported).
func (b *builder) addV6(table, chain string, exprs ...Expr) {
	if b.v6 {
		b.add(table, chain, exprs...)
	}
}

// insert inserts before the rule at index; upstream's transaction
// appends instead when the chain holds no more than index rules (nft
// refuses such an insert).
func (b *builder) insert(table, chain string, index int, exprs ...Expr) {
	n := 0
	for _, r := range b.rules[table] {
		if r.Chain == chain {
			n++
		}
	}
	r := Rule{Chain: chain, Exprs: exprs}
	if n > 0 && index < n {
		r.Insert, r.Index = true, index
	}
	b.rules[table] = append(b.rules[table], r)
}

func (b *builder) insertV6(table, chain string, index int, exprs ...Expr) {
	if b.v6 {
		b.insert(table, chain, index, exprs...)
	}
}

// interfaces: excluded interfaces are never captured, in nat and (with
// TPROXY) mangle; rerouted interfaces (virtual machines') return at the
// top of nat prerouting.
func (b *builder) interfaces(spec iptables.Spec) {
	for _, i := range spec.ExcludeInterfaces {
		b.add(TableNat, Prerouting, Iface{Name: i}, Counter{}, Return{})
		b.add(TableNat, Output, Iface{Out: true, Name: i}, Counter{}, Return{})
	}
	if spec.TProxy {
		for _, i := range spec.ExcludeInterfaces {
			b.add(TableMangle, Prerouting, Iface{Name: i}, Counter{}, Return{})
			b.add(TableMangle, Output, Iface{Out: true, Name: i}, Counter{}, Return{})
		}
	}
	for _, i := range spec.RerouteInterfaces {
		b.insert(TableNat, Prerouting, 0, Iface{Name: i}, Counter{}, Return{})
	}
}

// inbound captures TCP arriving at the pod; with no inbound ports nothing
// jumps from prerouting.
func (b *builder) inbound(spec iptables.Spec) {
	if spec.InboundPorts.None() {
		return
	}
	if spec.TProxy {
		b.inboundTProxy(spec)
		return
	}
	b.add(TableNat, Prerouting, tcp, Counter{}, Jump{ChainInbound})
	if spec.InboundPorts.All {
		for _, p := range spec.InboundExclude {
			b.add(TableNat, ChainInbound, tcp, dport(p), Counter{}, Return{})
		}
		b.add(TableNat, ChainInbound, tcp, Counter{}, Jump{ChainInRedir})
		return
	}
	for _, p := range spec.InboundPorts.List {
		b.add(TableNat, ChainInbound, tcp, dport(p), Counter{}, Jump{ChainInRedir})
	}
}

// inboundTProxy diverts inbound TCP in the mangle table: new connections
// are TPROXY'd to the inbound port with the mark policy routing delivers
// to lo; established ones are only marked (istio-divert).
func (b *builder) inboundTProxy(spec iptables.Spec) {
	b.add(TableMangle, ChainDivert, Counter{}, SetMark{spec.TProxyMark})
	b.add(TableMangle, ChainDivert, Counter{}, Accept{})
	b.add(TableMangle, ChainTProxy, tcp, Addr{Not: true, Prefix: loopbackV4},
		TProxy{Port: spec.InboundPort}, SetMark{spec.TProxyMark}, Counter{}, Accept{})
	b.addV6(TableMangle, ChainTProxy, tcp, Addr{Not: true, Prefix: loopbackV6},
		TProxy{V6: true, Port: spec.InboundPort}, SetMark{spec.TProxyMark}, Counter{}, Accept{})
	b.add(TableMangle, Prerouting, tcp, Counter{}, Jump{ChainInbound})
	if spec.InboundPorts.All {
		for _, p := range spec.InboundExclude {
			b.add(TableMangle, ChainInbound, tcp, dport(p), Counter{}, Return{})
		}
		b.add(TableMangle, ChainInbound, tcp, CtState{Established: true}, Counter{}, Jump{ChainDivert})
		b.add(TableMangle, ChainInbound, tcp, Counter{}, Jump{ChainTProxy})
		return
	}
	for _, p := range spec.InboundPorts.List {
		b.add(TableMangle, ChainInbound, tcp, CtState{Established: true}, dport(p), Counter{}, Jump{ChainDivert})
		b.add(TableMangle, ChainInbound, tcp, dport(p), Counter{}, Jump{ChainTProxy})
	}
}

// proxyOwner is one way to recognise the proxy's own sockets: its uid,
// then its gid, the order of every per-owner rule.
type proxyOwner struct {
	kind iptables.OwnerKind
	id   uint32
}

func proxyOwners(spec iptables.Spec) []proxyOwner {
	return []proxyOwner{{iptables.UID, spec.ProxyUID}, {iptables.GID, spec.ProxyGID}}
}

// outbound captures what the pod sends: everything enters istio-output,
// which returns early for what must not be captured.
func (b *builder) outbound(spec iptables.Spec) {
	lo := Iface{Out: true, Name: iptables.Loopback}
	b.add(TableNat, Output, Counter{}, Jump{ChainOutput})
	// Excluded ports go direct, for TCP and for UDP.
	for _, p := range spec.OutboundExclude {
		b.add(TableNat, ChainOutput, dport(p), Counter{}, Return{})
		b.add(TableNat, ChainOutput, Port{Proto: iptables.UDP, Ports: []uint16{p}}, Counter{}, Return{})
	}
	// Envoy's inbound passthrough connects to the app from 127.0.0.6 (::6).
	b.add(TableNat, ChainOutput, lo, Addr{Src: true, Prefix: passthroughV4}, Counter{}, Return{})
	b.addV6(TableNat, ChainOutput, lo, Addr{Src: true, Prefix: passthroughV6}, Counter{}, Return{})
	loopbackIncluded := false
	for _, p := range spec.OutboundIPs.List {
		loopbackIncluded = loopbackIncluded || p.Addr().IsLoopback()
	}
	for _, o := range proxyOwners(spec) {
		// The proxy calling a service VIP that resolves back to this pod
		// goes through inbound capture; with DNS capture the proxy's DNS
		// over lo is left alone (uid only, as upstream does).
		notPorts := Port{Proto: iptables.TCP, Not: true, Ports: []uint16{spec.TunnelPort}}
		if spec.DNSCapture && o.kind == iptables.UID {
			notPorts.Ports = []uint16{iptables.DNSPort, spec.TunnelPort}
		}
		owner := Owner{Kind: o.kind, ID: o.id}
		b.add(TableNat, ChainOutput, lo, tcp, Addr{Not: true, Prefix: loopbackV4}, notPorts, owner, Counter{}, Jump{ChainInRedir})
		b.addV6(TableNat, ChainOutput, lo, tcp, Addr{Not: true, Prefix: loopbackV6}, notPorts, owner, Counter{}, Jump{ChainInRedir})
		// The app talking to itself over lo is not captured, unless the
		// user captures loopback destinations; with DNS capture its TCP
		// DNS over lo is.
		notOwner := Owner{Kind: o.kind, ID: o.id, Not: true}
		switch {
		case loopbackIncluded:
		case spec.DNSCapture:
			b.add(TableNat, ChainOutput, lo, tcp, Port{Proto: iptables.TCP, Not: true, Ports: []uint16{iptables.DNSPort}}, notOwner, Counter{}, Return{})
		default:
			b.add(TableNat, ChainOutput, lo, notOwner, Counter{}, Return{})
		}
		// The proxy's own traffic is never captured again (no loops).
		b.add(TableNat, ChainOutput, owner, Counter{}, Return{})
	}
	if spec.DNSCapture {
		b.dns(spec)
	}
	// Traffic to localhost is the app talking to the proxy or to itself.
	b.add(TableNat, ChainOutput, Addr{Prefix: loopbackV4}, Counter{}, Return{})
	b.addV6(TableNat, ChainOutput, Addr{Prefix: loopbackV6}, Counter{}, Return{})
	for _, v6 := range []bool{false, true} {
		for _, p := range spec.OutboundIPExclude {
			if p.Addr().Is6() == v6 {
				b.addFamily(v6, TableNat, ChainOutput, Addr{Prefix: p.Masked()}, Counter{}, Return{})
			}
		}
	}
	for _, p := range spec.OutboundPorts {
		b.add(TableNat, ChainOutput, dport(p), Counter{}, Jump{ChainRedirect})
	}
	b.outboundIPs(spec)
}

func (b *builder) addFamily(v6 bool, table, chain string, exprs ...Expr) {
	if v6 {
		b.addV6(table, chain, exprs...)
		return
	}
	b.add(table, chain, exprs...)
}

// outboundIPs captures the chosen destinations, and what the rerouted
// interfaces bring in for them.
func (b *builder) outboundIPs(spec iptables.Spec) {
	if spec.OutboundIPs.All {
		b.add(TableNat, ChainOutput, Counter{}, Jump{ChainRedirect})
		for _, i := range spec.RerouteInterfaces {
			b.insert(TableNat, Prerouting, 0, Iface{Name: i}, Counter{}, Jump{ChainRedirect})
		}
		return
	}
	for _, v6 := range []bool{false, true} {
		for _, p := range spec.OutboundIPs.List {
			if p.Addr().Is6() != v6 {
				continue
			}
			for _, i := range spec.RerouteInterfaces {
				if v6 {
					b.insertV6(TableNat, Prerouting, 0, Iface{Name: i}, Addr{Prefix: p.Masked()}, Counter{}, Jump{ChainRedirect})
				} else {
					b.insert(TableNat, Prerouting, 0, Iface{Name: i}, Addr{Prefix: p.Masked()}, Counter{}, Jump{ChainRedirect})
				}
			}
			b.addFamily(v6, TableNat, ChainOutput, Addr{Prefix: p.Masked()}, Counter{}, Jump{ChainRedirect})
		}
	}
}

// dns sends the app's DNS, to any server, to the proxy's DNS listener (the
// proxy's own queries returned earlier in istio-output), and keeps the
// proxy's upstream DNS flows apart from the app's in conntrack: the
// proxy's queries and their replies in zone 1, the app's queries and the
// proxy's answers in zone 2.
func (b *builder) dns(spec iptables.Spec) {
	udp53 := Port{Proto: iptables.UDP, Ports: []uint16{iptables.DNSPort}}
	b.add(TableRaw, Output, Counter{}, Jump{ChainOutputDNS})
	b.add(TableNat, ChainOutput, Counter{}, Jump{ChainOutputDNS})
	b.add(TableNat, ChainOutputDNS, tcp, dport(iptables.DNSPort), Counter{}, Redirect{iptables.ProxyDNSPort})
	b.add(TableNat, ChainOutputDNS, udp53, Counter{}, Redirect{iptables.ProxyDNSPort})
	for _, o := range proxyOwners(spec) {
		owner := Owner{Kind: o.kind, ID: o.id, Meta: true}
		b.add(TableRaw, ChainOutputDNS, udp53, owner, Counter{}, SetZone{1})
		b.add(TableRaw, ChainOutputDNS, Port{Proto: iptables.UDP, Src: true, Ports: []uint16{iptables.ProxyDNSPort}}, owner, Counter{}, SetZone{2})
	}
	b.add(TableRaw, Prerouting, Counter{}, Jump{ChainInbound})
	b.add(TableRaw, ChainOutputDNS, udp53, Counter{}, SetZone{2})
	b.add(TableRaw, ChainInbound, Port{Proto: iptables.UDP, Src: true, Ports: []uint16{iptables.DNSPort}}, Counter{}, SetZone{1})
}

// tproxyMarks: the mark TPROXY put on a packet is saved on its
// connection and restored on the proxy's replies; the proxy's own traffic
// to the app over lo is marked so it is not captured inbound again; and
// istio-inbound lets through what is already diverted, Envoy's
// passthrough, and lo traffic not from the proxy.
func (b *builder) tproxyMarks(spec iptables.Spec) {
	lo := Iface{Out: true, Name: iptables.Loopback}
	inLo := Iface{Name: iptables.Loopback}
	b.add(TableMangle, Prerouting, tcp, Mark{Value: spec.TProxyMark}, Counter{}, SaveMark{})
	b.add(TableMangle, Output, lo, tcp, Mark{Value: spec.TProxyMark}, Counter{}, Return{})
	for _, o := range proxyOwners(spec) {
		owner := Owner{Kind: o.kind, ID: o.id}
		b.add(TableMangle, Output, lo, tcp, Addr{Not: true, Prefix: loopbackV4}, owner, Counter{}, SetMark{iptables.OutboundMark})
		b.addV6(TableMangle, Output, lo, tcp, Addr{Not: true, Prefix: loopbackV6}, owner, Counter{}, SetMark{iptables.OutboundMark})
	}
	b.add(TableMangle, Output, tcp, CtMark{spec.TProxyMark}, Counter{}, RestoreMark{})
	b.insert(TableMangle, ChainInbound, 0, tcp, Mark{Value: spec.TProxyMark}, Counter{}, Return{})
	b.insert(TableMangle, ChainInbound, 1, inLo, tcp, Addr{Src: true, Prefix: passthroughV4}, Counter{}, Return{})
	b.insertV6(TableMangle, ChainInbound, 1, inLo, tcp, Addr{Src: true, Prefix: passthroughV6}, Counter{}, Return{})
	b.insert(TableMangle, ChainInbound, 2, inLo, tcp, Mark{Value: iptables.OutboundMark, Not: true}, Counter{}, Return{})
}
