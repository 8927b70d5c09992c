package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Table names and the built-in chains we hook.
const (
	TableNat    = "nat"
	TableRaw    = "raw"
	TableMangle = "mangle"
	Prerouting  = "PREROUTING"
	Output      = "OUTPUT"
)

// The chains this product owns. Every chain whose name starts with ChainPrefix
// is treated as ours when cleaning up, so chains of older or newer versions go
// too.
const (
	ChainPrefix     = "ISTIO_"
	ChainInbound    = "ISTIO_INBOUND"
	ChainInRedirect = "ISTIO_IN_REDIRECT"
	ChainOutput     = "ISTIO_OUTPUT"
	ChainRedirect   = "ISTIO_REDIRECT"
	ChainOutputDNS  = "ISTIO_OUTPUT_DNS"
	ChainDivert     = "ISTIO_DIVERT"
	ChainTProxy     = "ISTIO_TPROXY"
	ChainDrop       = "ISTIO_DROP"
)

// Proto is the -p match.
type Proto uint8

const (
	AnyProto Proto = iota
	TCP
	UDP
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return ""
}

// Addr is an -s or -d match; the zero value matches any address.
type Addr struct {
	Prefix netip.Prefix
	Not    bool
}

// Iface is an -i or -o match; the zero value matches any interface.
type Iface struct {
	Name IfName
	Not  bool
}

// IfName is a network interface name. Outside this package one is made
// only by ParseIfName.
type IfName string

// ParseIfName accepts a Linux interface name as Istio does: 1 to 15
// characters of [A-Za-z0-9_.-], the first not '.' or '-' (so neither "."
// nor ".." nor anything that reads as an option).
func ParseIfName(s string) (IfName, error) {
	const allowed = "want 1 to 15 characters of A-Z, a-z, 0-9, '_', '.' and '-', not starting with '.' or '-'"
	if len(s) == 0 || len(s) > 15 || s[0] == '.' || s[0] == '-' {
		return "", fmt.Errorf("interface name %q: %s", s, allowed)
	}
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
		return "", fmt.Errorf("interface name %q: %s", s, allowed)
	}
	return IfName(s), nil
}

// Loopback is the pod's loopback interface.
const Loopback IfName = "lo"

// SPort matches a TCP or UDP source port (-m udp --sport N).
type SPort struct {
	Proto Proto
	Port  uint16
}

func (m SPort) tokens() []string {
	return []string{"-m", m.Proto.String(), "--sport", strconv.Itoa(int(m.Port))}
}

// NotDPorts matches destination ports outside a list (-m multiport !
// --dports a,b); the rule must set -p.
type NotDPorts struct{ Ports []uint16 }

func (m NotDPorts) tokens() []string {
	ps := make([]string, len(m.Ports))
	for i, p := range m.Ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return []string{"-m", "multiport", "!", "--dports", strings.Join(ps, ",")}
}

// CT puts a connection into a conntrack zone (raw table).
type CT struct{ Zone uint16 }

func (t CT) tokens() []string { return []string{"-j", "CT", "--zone", strconv.Itoa(int(t.Zone))} }

// Mark matches the packet mark (-m mark [!] --mark 0x539).
type Mark struct {
	Value uint32
	Not   bool
}

func (m Mark) tokens() []string {
	t := []string{"-m", "mark"}
	if m.Not {
		t = append(t, "!")
	}
	return append(t, "--mark", hex(m.Value))
}

// ConnMark matches the connection mark (-m connmark --mark 0x539).
type ConnMark struct{ Value uint32 }

func (m ConnMark) tokens() []string { return []string{"-m", "connmark", "--mark", hex(m.Value)} }

// InvalidState matches packets conntrack cannot place in a connection.
type InvalidState struct{}

func (InvalidState) tokens() []string { return []string{"-m", "conntrack", "--ctstate", "INVALID"} }

// Drop is -j DROP.
type Drop struct{}

func (Drop) tokens() []string { return []string{"-j", "DROP"} }

// Established matches packets of known connections.
type Established struct{}

func (Established) tokens() []string {
	return []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}
}

func hex(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// SetMark sets the packet mark (MARK --set-mark, printed as --set-xmark).
type SetMark struct{ Value uint32 }

func (t SetMark) tokens() []string {
	return []string{"-j", "MARK", "--set-xmark", hex(t.Value) + "/0xffffffff"}
}

// Accept is -j ACCEPT.
type Accept struct{}

func (Accept) tokens() []string { return []string{"-j", "ACCEPT"} }

// TProxy hands a packet to a local transparent listener on Port, marking it.
type TProxy struct {
	Port uint16
	Mark uint32
	V6   bool
}

func (t TProxy) tokens() []string {
	ip := "0.0.0.0"
	if t.V6 {
		ip = "::"
	}
	return []string{"-j", "TPROXY", "--on-port", strconv.Itoa(int(t.Port)), "--on-ip", ip,
		"--tproxy-mark", hex(t.Mark) + "/0xffffffff"}
}

// ConnMarkSave copies the packet mark to the connection; ConnMarkRestore
// the connection's mark back to its packets.
type (
	ConnMarkSave    struct{}
	ConnMarkRestore struct{}
)

func (ConnMarkSave) tokens() []string {
	return []string{"-j", "CONNMARK", "--save-mark", "--nfmask", "0xffffffff", "--ctmask", "0xffffffff"}
}

func (ConnMarkRestore) tokens() []string {
	return []string{"-j", "CONNMARK", "--restore-mark", "--nfmask", "0xffffffff", "--ctmask", "0xffffffff"}
}

// Tag marks a rule of ours in a built-in chain whose target is not one of
// our chains (an interface's RETURN): without a jump into an ISTIO_ chain
// nothing else would tell it from a foreign rule, for CHECK and cleanup.
type Tag struct{}

// RuleTag is the comment Tag puts on a rule.
const RuleTag = "istio-cni"

func (Tag) tokens() []string { return []string{"-m", "comment", "--comment", RuleTag} }

// Match is an extension match (-m ...), rendered from typed fields. Its
// marker method keeps a target from being passed as a match.
type Match interface {
	tokens() []string
	match()
}

// DPort matches a TCP or UDP destination port (-m tcp --dport N).
type DPort struct {
	Proto Proto
	Port  uint16
	Not   bool
}

func (m DPort) tokens() []string {
	t := []string{"-m", m.Proto.String()}
	if m.Not {
		t = append(t, "!")
	}
	return append(t, "--dport", strconv.Itoa(int(m.Port)))
}

// OwnerKind says which id of the sending socket an Owner match tests.
type OwnerKind uint8

const (
	UID OwnerKind = iota
	GID
)

// Owner matches locally generated packets by socket owner (-m owner).
type Owner struct {
	Kind OwnerKind
	ID   uint32
	Not  bool
}

func (m Owner) tokens() []string {
	t := []string{"-m", "owner"}
	if m.Not {
		t = append(t, "!")
	}
	opt := "--uid-owner"
	if m.Kind == GID {
		opt = "--gid-owner"
	}
	return append(t, opt, strconv.FormatUint(uint64(m.ID), 10))
}

// Target is what a rule does (-j ...). Its marker method keeps a match from
// being passed as a target.
type Target interface {
	tokens() []string
	target()
}

// Jump continues in another chain.
type Jump struct{ Chain string }

func (t Jump) tokens() []string { return []string{"-j", t.Chain} }

// Return leaves the current chain.
type Return struct{}

func (Return) tokens() []string { return []string{"-j", "RETURN"} }

// Redirect sends the packet to a local port (nat REDIRECT).
type Redirect struct{ ToPort uint16 }

func (t Redirect) tokens() []string {
	return []string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(int(t.ToPort))}
}

// The match and target markers.
func (InvalidState) match()     {}
func (SPort) match()            {}
func (NotDPorts) match()        {}
func (Mark) match()             {}
func (ConnMark) match()         {}
func (Established) match()      {}
func (Tag) match()              {}
func (DPort) match()            {}
func (Owner) match()            {}
func (Drop) target()            {}
func (CT) target()              {}
func (SetMark) target()         {}
func (Accept) target()          {}
func (TProxy) target()          {}
func (ConnMarkSave) target()    {}
func (ConnMarkRestore) target() {}
func (Jump) target()            {}
func (Return) target()          {}
func (Redirect) target()        {}

// Rule is one rule of a chain. Its fields follow the order in which
// iptables-save prints them, so a rendered rule reads back unchanged.
type Rule struct {
	Table   string
	Chain   string
	Src     Addr
	Dst     Addr
	In      Iface
	Out     Iface
	Proto   Proto
	Matches []Match
	Target  Target
}

// Args renders the rule's arguments: everything after "-A CHAIN", in the
// canonical form iptables-save prints.
func (r Rule) Args() string {
	var t []string
	addr := func(opt string, a Addr) {
		// A /0 matches every address; iptables-save prints no match for it.
		if !a.Prefix.IsValid() || a.Prefix.Bits() == 0 {
			return
		}
		if a.Not {
			t = append(t, "!")
		}
		t = append(t, opt, a.Prefix.String())
	}
	iface := func(opt string, i Iface) {
		if i.Name == "" {
			return
		}
		if i.Not {
			t = append(t, "!")
		}
		t = append(t, opt, string(i.Name))
	}
	addr("-s", r.Src)
	addr("-d", r.Dst)
	iface("-i", r.In)
	iface("-o", r.Out)
	if r.Proto != AnyProto {
		t = append(t, "-p", r.Proto.String())
	}
	for _, m := range r.Matches {
		t = append(t, m.tokens()...)
	}
	t = append(t, r.Target.tokens()...)
	return strings.Join(t, " ")
}

// checkTokens rejects a rendered line holding anything but safe tokens:
// single-space separated words of [A-Za-z0-9_.:/,!-], or "[0:0]".
// iptables-restore splits lines on white space and treats quotes specially;
// anything else would mean a value reached a rule untyped.
func checkTokens(line string) error {
	toks := strings.Split(line, " ")
	for i, tok := range toks {
		if tok == "" || (!safeWord(tok) && tok != "[0:0]") {
			return fmt.Errorf("refusing to render unsafe token %q in %q", tok, line)
		}
		// An IfName made without ParseIfName ("-j", say) would read as
		// an option.
		if (tok == "-i" || tok == "-o") && i+1 < len(toks) {
			if _, err := ParseIfName(toks[i+1]); err != nil {
				return fmt.Errorf("refusing to render %q: %w", line, err)
			}
		}
	}
	return nil
}

func safeWord(tok string) bool {
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.:/,!-", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
