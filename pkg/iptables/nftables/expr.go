package nftables

import (
	"net/netip"
	"strconv"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// Expr is one part of a rule, a match or a statement, in the order nft
// writes it. Each renders the words `nft` takes and prints for it; the
// netlink writer (nfnl) encodes the same values.
type Expr interface{ words() []string }

// L4Proto matches the transport protocol: meta l4proto tcp.
type L4Proto struct{ Proto iptables.Proto }

// Port matches a TCP or UDP port; more than one port makes an anonymous
// set (tcp dport != { 53, 15008 }), which only Not uses.
type Port struct {
	Proto iptables.Proto
	Src   bool
	Not   bool
	Ports []uint16
}

// Addr matches an IPv4 (ip) or IPv6 (ip6) source or destination prefix.
type Addr struct {
	Src    bool
	Not    bool
	Prefix netip.Prefix
}

// Iface matches the input (iifname) or output (oifname) interface.
type Iface struct {
	Out  bool
	Name iptables.IfName
}

// Owner matches the socket's uid (skuid) or gid (skgid). Meta is only how
// upstream spells it in the raw table (meta skuid); the kernel sees the
// same expression.
type Owner struct {
	Kind iptables.OwnerKind
	ID   uint32
	Not  bool
	Meta bool
}

// CtState matches conntrack states: ct state invalid, or related and
// established.
type CtState struct{ Established bool }

// Mark matches the packet mark: mark 1337, mark != 1338.
type Mark struct {
	Value uint32
	Not   bool
}

// CtMark matches the connection's mark: ct mark 1337.
type CtMark struct{ Value uint32 }

// Counter counts packets and bytes.
type Counter struct{}

// Verdicts.
type (
	Return struct{}
	Accept struct{}
	Drop   struct{}
	Jump   struct{ Chain string }
)

// Redirect sends the packet to a local port: redirect to :15001.
type Redirect struct{ Port uint16 }

// TProxy diverts the packet to a local port keeping its destination:
// tproxy ip to :15006 (ip6 when V6).
type TProxy struct {
	V6   bool
	Port uint16
}

// SetMark sets the packet mark: meta mark set 1337.
type SetMark struct{ Value uint32 }

// SaveMark copies the packet mark to the connection: ct mark set mark.
type SaveMark struct{}

// RestoreMark copies the connection's mark to the packet: meta mark set ct mark.
type RestoreMark struct{}

// SetZone puts the connection in a conntrack zone: ct zone set 1.
type SetZone struct{ Zone uint16 }

func num[T uint16 | uint32](v T) string { return strconv.FormatUint(uint64(v), 10) }

func not(b bool) []string {
	if b {
		return []string{"!="}
	}
	return nil
}

func (e L4Proto) words() []string { return []string{"meta", "l4proto", e.Proto.String()} }

func (e Port) words() []string {
	dir := "dport"
	if e.Src {
		dir = "sport"
	}
	w := append([]string{e.Proto.String(), dir}, not(e.Not)...)
	if len(e.Ports) == 1 {
		return append(w, num(e.Ports[0]))
	}
	ps := make([]string, len(e.Ports))
	for i, p := range e.Ports {
		ps[i] = num(p)
	}
	return append(w, "{", strings.Join(ps, ", "), "}")
}

func (e Addr) words() []string {
	fam, dir := "ip", "daddr"
	if e.Prefix.Addr().Is6() {
		fam = "ip6"
	}
	if e.Src {
		dir = "saddr"
	}
	return append(append([]string{fam, dir}, not(e.Not)...), e.Prefix.String())
}

func (e Iface) words() []string {
	if e.Out {
		return []string{"oifname", string(e.Name)}
	}
	return []string{"iifname", string(e.Name)}
}

func (e Owner) words() []string {
	key := "skuid"
	if e.Kind == iptables.GID {
		key = "skgid"
	}
	var w []string
	if e.Meta {
		w = []string{"meta"}
	}
	return append(append(append(w, key), not(e.Not)...), num(e.ID))
}

func (e CtState) words() []string {
	if e.Established {
		return []string{"ct", "state", "related,established"}
	}
	return []string{"ct", "state", "invalid"}
}

func (e Mark) words() []string {
	return append(append([]string{"mark"}, not(e.Not)...), num(e.Value))
}

func (e CtMark) words() []string   { return []string{"ct", "mark", num(e.Value)} }
func (Counter) words() []string    { return []string{"counter"} }
func (Return) words() []string     { return []string{"return"} }
func (Accept) words() []string     { return []string{"accept"} }
func (Drop) words() []string       { return []string{"drop"} }
func (e Jump) words() []string     { return []string{"jump", e.Chain} }
func (e Redirect) words() []string { return []string{"redirect", "to", ":" + num(e.Port)} }
func (e TProxy) words() []string {
	fam := "ip"
	if e.V6 {
		fam = "ip6"
	}
	return []string{"tproxy", fam, "to", ":" + num(e.Port)}
}
func (e SetMark) words() []string   { return []string{"meta", "mark", "set", num(e.Value)} }
func (SaveMark) words() []string    { return []string{"ct", "mark", "set", "mark"} }
func (RestoreMark) words() []string { return []string{"meta", "mark", "set", "ct", "mark"} }
func (e SetZone) words() []string   { return []string{"ct", "zone", "set", num(e.Zone)} }
