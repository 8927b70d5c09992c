package legacy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/xtinfo"
)

// ErrUnsupported means a rule has a part this package does not lay out;
// nothing was written.
var ErrUnsupported = errors.New("not writable as an x_tables entry")

// ErrNotFresh means a table holds more than its empty built-in chains
// with their ACCEPT policies: a repeated ADD, or someone else's rules.
// Nothing was written.
var ErrNotFresh = errors.New("the table is not fresh")

var ne = binary.NativeEndian

// abi is one family's x_tables structures (linux/netfilter_ipv4/ip_tables.h,
// linux/netfilter_ipv6/ip6_tables.h).
type abi struct {
	fam iptables.Family
	// entry is sizeof(struct ipt_entry) or ip6t_entry: the matches start there.
	entry int
	// ipLen is sizeof(struct ipt_ip) or ip6t_ip6: nfcache follows it, then
	// target_offset and next_offset.
	ipLen int
	// addrLen, and where the addresses, interfaces and protocol sit in
	// the ip part.
	addrLen, ifaces, proto int
}

var (
	abi4 = abi{fam: iptables.IPv4, entry: 112, ipLen: 84, addrLen: 4, ifaces: 16, proto: 80}
	abi6 = abi{fam: iptables.IPv6, entry: 168, ipLen: 136, addrLen: 16, ifaces: 64, proto: 128}
)

func abiOf(f iptables.Family) abi {
	if f == iptables.IPv6 {
		return abi6
	}
	return abi4
}

// The sizes of the x_tables records (linux/netfilter/x_tables.h), each
// XT_ALIGNed: a match's or target's header, the standard target (a
// verdict) and the error target (a user chain's head, the table's end).
const (
	extHeader      = 32
	standardTarget = 40
	errorTarget    = 64
	nameLen        = 29 // XT_EXTENSION_MAXNAMELEN
	chainNameLen   = 30 // XT_FUNCTION_MAXNAMELEN
)

// Verdicts of the standard target, and the invert flags of the ip part.
const (
	verdictDrop   = -1 // -NF_DROP - 1
	verdictAccept = -2 // -NF_ACCEPT - 1
	verdictReturn = -5 // XT_RETURN: -NF_REPEAT - 1

	invIn    = 0x01
	invOut   = 0x02
	invSrc   = 0x08
	invDst   = 0x10
	v6Proto  = 0x01 // IP6T_F_PROTO
	numHooks = 5
)

// hookNames are the built-in chains by hook (NF_INET_PRE_ROUTING ...).
var hookNames = [numHooks]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// layout is a table's new contents, laid out as libiptc's commit lays out
// what iptables-legacy-restore parsed (iptcc_compile_table): the built-in
// chains in hook order, each its rules and its policy; then the declared
// chains sorted by name, each a head naming it, its rules and a RETURN;
// then the table's closing error entry.
type layout struct {
	entries            []byte
	num                int
	hookEntry, hookEnd [numHooks]uint32
	// policy is each hooked chain's policy entry's index, for carrying
	// its counters over.
	policy map[int]int
}

// compile lays out one table of rs for a kernel table hooked at hooks.
func compile(a abi, table string, hooks []int, rs *iptables.Ruleset) (*layout, error) {
	var chains []string
	builtins := map[string]int{}
	for _, h := range hooks {
		builtins[hookNames[h]] = h
	}
	for _, c := range rs.Chains {
		if c.Table != table {
			continue
		}
		if _, ok := builtins[c.Name]; ok {
			return nil, fmt.Errorf("declared chain %s is built in: %w", c.Name, ErrUnsupported)
		}
		if len(c.Name) >= nameLen {
			// libiptc's limit (XT_EXTENSION_MAXNAMELEN - 1), which
			// iptables-legacy-restore refuses past.
			return nil, fmt.Errorf("chain name %q is over %d bytes: %w", c.Name, nameLen-1, ErrUnsupported)
		}
		chains = append(chains, c.Name)
	}
	slices.Sort(chains) // libiptc keeps user chains sorted by strcmp
	rules := map[string][][]byte{}
	jumps := map[string][]jumpAt{} // chain -> the jumps in its rules
	for i, r := range rs.Rules {
		if r.Table != table {
			continue
		}
		if _, ok := builtins[r.Chain]; !ok && !slices.Contains(chains, r.Chain) {
			return nil, fmt.Errorf("rule %d's chain %s is neither built in nor declared in %s: %w", i+1, r.Chain, table, ErrUnsupported)
		}
		e, jump, err := entry(a, r)
		if err != nil {
			return nil, fmt.Errorf("rule %d (-A %s %s): %w", i+1, r.Chain, r.Args(), err)
		}
		if jump != "" {
			if !slices.Contains(chains, jump) {
				return nil, fmt.Errorf("rule %d jumps to %s, not declared in %s: %w", i+1, jump, table, ErrUnsupported)
			}
			jumps[r.Chain] = append(jumps[r.Chain], jumpAt{len(rules[r.Chain]), jump})
		}
		rules[r.Chain] = append(rules[r.Chain], e)
	}
	l := &layout{policy: map[int]int{}}
	starts := map[string]int{}    // chain -> offset of its first rule
	offsets := map[string][]int{} // chain -> offset of each rule
	emit := func(b []byte) int {
		at := len(l.entries)
		l.entries = append(l.entries, b...)
		l.num++
		return at
	}
	for _, h := range hooks {
		name := hookNames[h]
		l.hookEntry[h] = uint32(len(l.entries)) // #nosec G115 -- a table is far under 4 GiB
		starts[name] = len(l.entries)
		for _, e := range rules[name] {
			offsets[name] = append(offsets[name], emit(e))
		}
		l.hookEnd[h] = uint32(len(l.entries)) // #nosec G115 -- as above
		l.policy[h] = l.num
		emit(standard(a, verdictAccept))
	}
	for _, c := range chains {
		emit(errorEntry(a, c))
		starts[c] = len(l.entries)
		for _, e := range rules[c] {
			offsets[c] = append(offsets[c], emit(e))
		}
		emit(standard(a, verdictReturn))
	}
	emit(errorEntry(a, "ERROR"))
	// Each jump's verdict is where its chain's rules start.
	for from, js := range jumps {
		for _, j := range js {
			at := offsets[from][j.rule]
			target := at + int(ne.Uint16(l.entries[at+a.ipLen+4:]))
			ne.PutUint32(l.entries[target+extHeader:], uint32(starts[j.chain])) // #nosec G115 -- as above
		}
	}
	return l, nil
}

// jumpAt is a rule's jump to a declared chain, its verdict filled in once
// the chain's place is known.
type jumpAt struct {
	rule  int
	chain string
}

// entry is one rule as iptables-legacy makes it (generate_entry): the ip
// part, the matches in order, the target; and the chain it jumps to, if
// a declared one.
func entry(a abi, r iptables.Rule) ([]byte, string, error) {
	e := make([]byte, a.entry, a.entry+256)
	if err := ipPart(a, e, r); err != nil {
		return nil, "", err
	}
	for _, m := range r.Matches {
		if err := portProto(m, r.Proto); err != nil {
			return nil, "", err
		}
		ext, err := xtinfo.Match(m)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		e = appendExt(e, ext)
	}
	targetAt := len(e)
	jump := ""
	switch t := r.Target.(type) {
	case iptables.Jump:
		if t.Chain == "" {
			return nil, "", fmt.Errorf("a jump without a chain: %w", ErrUnsupported)
		}
		jump = t.Chain
		e = appendStandard(e, 0) // filled in by compile
	case iptables.Return:
		e = appendStandard(e, verdictReturn)
	case iptables.Accept:
		e = appendStandard(e, verdictAccept)
	case iptables.Drop:
		e = appendStandard(e, verdictDrop)
	default:
		ext, err := xtinfo.Target(a.fam, t)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		e = appendExt(e, ext)
	}
	ne.PutUint16(e[a.ipLen+4:], uint16(targetAt)) // #nosec G115 -- an entry is a few hundred bytes
	ne.PutUint16(e[a.ipLen+6:], uint16(len(e)))   // #nosec G115 -- as above
	return e, jump, nil
}

// portProto refuses a port match in a rule whose -p is not its protocol:
// the kernel would refuse the whole table for it.
func portProto(m iptables.Match, p iptables.Proto) error {
	var want iptables.Proto
	switch m := m.(type) {
	case iptables.DPort:
		want = m.Proto
	case iptables.SPort:
		want = m.Proto
	default:
		return nil
	}
	if want != p {
		return fmt.Errorf("-m %s port match in a rule of protocol %q: %w", want, p, ErrUnsupported)
	}
	return nil
}

// ipPart fills the ip part (struct ipt_ip or ip6t_ip6) as iptables'
// option parsing does: each address masked with its mask, each interface
// with a mask over its name and the NUL after it, -p in proto (and, for
// IPv6, IP6T_F_PROTO), "!" in the invert flags.
func ipPart(a abi, e []byte, r iptables.Rule) error {
	var inv byte
	for i, x := range []iptables.Addr{r.Src, r.Dst} {
		if !x.Prefix.IsValid() || x.Prefix.Bits() == 0 {
			continue
		}
		p := x.Prefix.Masked()
		if p.Addr().BitLen() != a.addrLen*8 {
			return fmt.Errorf("address %s in a %d-byte family: %w", p, a.addrLen, ErrUnsupported)
		}
		copy(e[i*a.addrLen:], p.Addr().AsSlice())
		mask := e[(2+i)*a.addrLen : (3+i)*a.addrLen]
		for b := range p.Bits() {
			mask[b/8] |= 0x80 >> (b % 8)
		}
		if x.Not {
			inv |= []byte{invSrc, invDst}[i]
		}
	}
	for i, x := range []iptables.Iface{r.In, r.Out} {
		if x.Name == "" {
			continue
		}
		name := e[a.ifaces+16*i : a.ifaces+16*(i+1)]
		mask := e[a.ifaces+32+16*i : a.ifaces+32+16*(i+1)]
		if len(x.Name) > 15 {
			return fmt.Errorf("interface %q: %w", x.Name, ErrUnsupported)
		}
		copy(name, x.Name)
		for b := range len(x.Name) + 1 {
			mask[b] = 0xff
		}
		if x.Not {
			inv |= []byte{invIn, invOut}[i]
		}
	}
	switch r.Proto {
	case iptables.AnyProto:
	case iptables.TCP, iptables.UDP:
		ne.PutUint16(e[a.proto:], map[iptables.Proto]uint16{iptables.TCP: 6, iptables.UDP: 17}[r.Proto])
		if a.fam == iptables.IPv6 {
			e[a.proto+3] = v6Proto
		}
	default:
		return fmt.Errorf("protocol %v: %w", r.Proto, ErrUnsupported)
	}
	// IPv4's invflags follow proto and flags; IPv6's follow tos too.
	invAt := a.proto + 3
	if a.fam == iptables.IPv6 {
		invAt = a.proto + 4
	}
	e[invAt] = inv
	return nil
}

// appendExt appends a match or target: its header (size, name, revision)
// and its info.
func appendExt(e []byte, ext xtinfo.Ext) []byte {
	h := make([]byte, extHeader)
	ne.PutUint16(h, uint16(extHeader+len(ext.Info))) // #nosec G115 -- infos are at most a few hundred bytes
	copy(h[2:2+nameLen-1], ext.Name)
	h[extHeader-1] = ext.Rev
	return append(append(e, h...), ext.Info...)
}

// appendStandard appends the standard target with a verdict: its name
// is empty.
func appendStandard(e []byte, verdict int32) []byte {
	t := make([]byte, standardTarget)
	ne.PutUint16(t, standardTarget)
	ne.PutUint32(t[extHeader:], uint32(verdict)) // #nosec G115 -- the kernel reads it back as the signed verdict
	return append(e, t...)
}

// standard is an entry of the standard target alone: a built-in chain's
// policy, or a declared chain's closing RETURN.
func standard(a abi, verdict int32) []byte {
	e := appendStandard(make([]byte, a.entry), verdict)
	ne.PutUint16(e[a.ipLen+4:], uint16(a.entry)) // #nosec G115 -- 112 or 168
	ne.PutUint16(e[a.ipLen+6:], uint16(len(e)))  // #nosec G115 -- as above
	return e
}

// errorEntry is an entry of the error target: a declared chain's head,
// naming it, or the table's end, naming "ERROR".
func errorEntry(a abi, name string) []byte {
	e := make([]byte, a.entry+errorTarget)
	ne.PutUint16(e[a.ipLen+4:], uint16(a.entry)) // #nosec G115 -- as above
	ne.PutUint16(e[a.ipLen+6:], uint16(len(e)))  // #nosec G115 -- as above
	t := e[a.entry:]
	ne.PutUint16(t, errorTarget)
	copy(t[2:], "ERROR")
	copy(t[extHeader:extHeader+chainNameLen-1], name)
	return e
}
