package nfnl

import (
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// diffNative lists how the held tables differ from the planned ones, in
// nftables.Tables' order.
func diffNative(want map[string]*plannedTable, held map[string]*heldTable) []string {
	var out []string
	for _, name := range nftables.Tables {
		w, h := want[name], held[name]
		switch {
		case w == nil && h == nil:
		case w == nil:
			out = append(out, "table inet "+name+": present, but the ruleset has no such table")
		case h == nil:
			out = append(out, "table inet "+name+": missing")
		default:
			out = append(out, diffTable(w, h)...)
		}
	}
	return out
}

func diffTable(w *plannedTable, h *heldTable) []string {
	var out []string
	where := "table inet " + w.name
	if h.flags != 0 {
		// A dormant table's chains see no packets.
		out = append(out, fmt.Sprintf("%s: flags %#x, want none", where, h.flags))
	}
	for _, wc := range w.chains {
		i := slices.IndexFunc(h.chains, func(c heldChain) bool { return c.name == wc.Name })
		if i < 0 {
			out = append(out, fmt.Sprintf("%s: chain %s missing", where, wc.Name))
			continue
		}
		hc := h.chains[i]
		at := where + " chain " + wc.Name
		if base := plannedBase(wc.Chain); hc.base != base {
			out = append(out, fmt.Sprintf("%s: %s, want %s", at, orRegular(hc.base), orRegular(base)))
		}
		out = append(out, diffRules(at, wc.rules, h, hc.rules)...)
	}
	for _, hc := range h.chains {
		if !slices.ContainsFunc(w.chains, func(c plannedChain) bool { return c.Name == hc.name }) {
			out = append(out, fmt.Sprintf("%s: an unexpected chain %s", where, hc.name))
		}
	}
	var named []string
	for name, s := range h.sets {
		if u32Of(attrValue(s.attrs, unix.NFTA_SET_FLAGS))&unix.NFT_SET_ANONYMOUS == 0 {
			named = append(named, name)
		}
	}
	slices.Sort(named)
	for _, name := range named {
		out = append(out, fmt.Sprintf("%s: an unexpected set %s", where, name))
	}
	return out
}

// diffRules names the rules missing from a chain (by their text), those
// it should not hold (by handle), or, when it holds the same rules, that
// their order differs.
func diffRules(at string, want []plannedRule, t *heldTable, held []heldRule) []string {
	wantCanon := make([]string, len(want))
	for i, r := range want {
		wantCanon[i] = r.canon()
	}
	heldCanon := make([]string, len(held))
	for i, r := range held {
		heldCanon[i] = t.canon(r)
	}
	if slices.Equal(wantCanon, heldCanon) {
		return nil
	}
	pool := map[string][]int{} // held rules not yet matched, by encoding
	for i, c := range heldCanon {
		pool[c] = append(pool[c], i)
	}
	var out []string
	for i, c := range wantCanon {
		if len(pool[c]) == 0 {
			out = append(out, fmt.Sprintf("%s: missing rule %s", at, want[i].text))
			continue
		}
		pool[c] = pool[c][1:]
	}
	var extra []int
	for _, idx := range pool {
		extra = append(extra, idx...)
	}
	slices.Sort(extra)
	for _, i := range extra {
		out = append(out, fmt.Sprintf("%s: an unexpected rule (handle %d)", at, held[i].handle))
	}
	if len(out) == 0 {
		out = append(out, at+": the rules are in another order")
	}
	return out
}

func plannedBase(c nftables.Chain) string {
	if c.Base == nil {
		return ""
	}
	return chainBase(c.Base.Type, hookNums[c.Base.Hook], c.Base.Priority, nfAccept)
}

func orRegular(base string) string {
	if base == "" {
		return "a regular chain"
	}
	return base
}

// canon is a planned rule's expressions as canonExprs renders them.
func (r plannedRule) canon() string {
	return canonExprs(r.exprs, func(_ string, id uint32) string {
		for _, s := range r.sets {
			if s.id == id {
				var a attrs
				s.setAttrs(&a, "")
				keys := make([][]byte, len(s.port.Ports))
				for i, p := range s.port.Ports {
					keys[i] = binary.BigEndian.AppendUint16(nil, p)
				}
				return setDesc(parseAttrs(a.b), keys)
			}
		}
		return "set#" + strconv.FormatUint(uint64(id), 10)
	})
}

// canon is a held rule's expressions as canonExprs renders them, with a
// comment (userdata) if it has one.
func (t *heldTable) canon(r heldRule) string {
	s := canonExprs(r.exprs, func(name string, _ uint32) string {
		if set, ok := t.sets[name]; ok {
			return setDesc(set.attrs, set.elems)
		}
		return "set " + name
	})
	if r.udata != nil {
		s += " userdata=" + hex.EncodeToString(r.udata)
	}
	return s
}

// setDesc describes a set by what a lookup of it tests: its flags, its
// key's type and length, its userdata (how nft prints it) and its keys,
// sorted (the kernel returns a hash set's in its own order).
func setDesc(as []attr, keys [][]byte) string {
	var b strings.Builder
	for _, typ := range []uint16{unix.NFTA_SET_FLAGS, unix.NFTA_SET_KEY_TYPE, unix.NFTA_SET_KEY_LEN, unix.NFTA_SET_USERDATA} {
		fmt.Fprintf(&b, "%d=%x,", typ, attrValue(as, typ))
	}
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, func(a, b []byte) int { return cmp.Compare(string(a), string(b)) })
	for _, k := range sorted {
		fmt.Fprintf(&b, "%x;", k)
	}
	return b.String()
}

func attrValue(as []attr, typ uint16) []byte {
	for _, a := range as {
		if a.typ == typ {
			return a.value
		}
	}
	return nil
}

// canonExprs renders a rule's expressions for comparison: each expression's
// attributes sorted by type (nft and the kernel order some apart), nested
// ones alike; a counter without its values; a lookup with its set's
// description (set) in place of its name and id; and the attributes the
// kernel adds at their default value (a bitwise's boolean op, a lookup's
// zero flags, a redir's maximum port equal to its minimum) left out.
func canonExprs(b []byte, set func(name string, id uint32) string) string {
	var parts []string
	for _, elem := range parseAttrs(b) {
		name, data := exprParts(elem.value)
		parts = append(parts, name+canonData(name, data, set))
	}
	return strings.Join(parts, " ")
}

// exprParts splits one of a rule's expressions, as the kernel sends it,
// into its name and its data attribute.
func exprParts(b []byte) (name string, data []byte) {
	for _, a := range parseAttrs(b) {
		switch a.typ {
		case unix.NFTA_EXPR_NAME:
			name = string(trimNul(a.value))
		case unix.NFTA_EXPR_DATA:
			data = a.value
		}
	}
	return name, data
}

func canonData(name string, data []byte, set func(name string, id uint32) string) string {
	if name == "counter" {
		return ""
	}
	as := parseAttrs(data)
	value := func(typ uint16) []byte { return attrValue(as, typ) }
	drop := map[uint16]bool{}
	extra := ""
	switch name {
	case "lookup":
		drop[unix.NFTA_LOOKUP_SET], drop[unix.NFTA_LOOKUP_SET_ID] = true, true
		drop[unix.NFTA_LOOKUP_FLAGS] = u32Of(value(unix.NFTA_LOOKUP_FLAGS)) == 0
		extra = " set=" + set(string(trimNul(value(unix.NFTA_LOOKUP_SET))), u32Of(value(unix.NFTA_LOOKUP_SET_ID)))
	case "bitwise":
		drop[nftaBitwiseOp] = u32Of(value(nftaBitwiseOp)) == 0
	case "redir":
		drop[unix.NFTA_REDIR_REG_PROTO_MAX] = string(value(unix.NFTA_REDIR_REG_PROTO_MAX)) == string(value(unix.NFTA_REDIR_REG_PROTO_MIN))
	}
	kept := as[:0:0]
	for _, a := range as {
		if !drop[a.typ] {
			kept = append(kept, a)
		}
	}
	return "{" + renderAttrs(name, kept) + extra + "}"
}

// dataAttrs are the attributes of each expression that hold an nft_data
// (a value or a verdict), by expression name.
var dataAttrs = map[string]map[uint16]bool{
	"cmp":       {unix.NFTA_CMP_DATA: true},
	"bitwise":   {unix.NFTA_BITWISE_MASK: true, unix.NFTA_BITWISE_XOR: true, nftaBitwiseData: true},
	"immediate": {unix.NFTA_IMMEDIATE_DATA: true},
}

// renderAttrs prints an expression's attributes sorted by type, its
// nft_data ones by their content: nft marks nested attributes as such,
// the kernel's dumps do not. It runs for every rule of every read back
// (the ADD's own among them), so it appends rather than formats.
func renderAttrs(name string, as []attr) string {
	sorted := slices.Clone(as)
	slices.SortStableFunc(sorted, func(a, b attr) int { return cmp.Compare(a.typ, b.typ) })
	var b []byte
	for i, a := range sorted {
		if i > 0 {
			b = append(b, ' ')
		}
		if !dataAttrs[name][a.typ] {
			b = appendAttr(b, "", a)
			continue
		}
		b = strconv.AppendUint(b, uint64(a.typ), 10)
		b = append(b, '{')
		n := 0
		for _, d := range parseAttrs(a.value) {
			if d.typ != unix.NFTA_DATA_VERDICT {
				b = appendAttr(sep(b, n), "", d)
				n++
				continue
			}
			for _, v := range parseAttrs(d.value) {
				b = appendAttr(sep(b, n), "verdict.", v)
				n++
			}
		}
		b = append(b, '}')
	}
	return string(b)
}

// appendAttr appends "TYPE=HEX", the type after prefix.
func appendAttr(b []byte, prefix string, a attr) []byte {
	b = strconv.AppendUint(append(b, prefix...), uint64(a.typ), 10)
	return hex.AppendEncode(append(b, '='), a.value)
}

// sep appends the space before all but the first of a list's items.
func sep(b []byte, n int) []byte {
	if n > 0 {
		return append(b, ' ')
	}
	return b
}
