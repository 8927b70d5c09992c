package nfnl

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// Replace makes the calling thread's network namespace hold a family's
// ruleset in place of whatever of ours it holds, in one nf_tables
// transaction laid out as l: our rules in chains not ours (a jump into
// one of our chains, a rule with our tag) and our chains go, the
// ruleset's come, and the rest of the tables stays. It is the node
// agent's repair of a running pod: with no moment between removing and
// writing, the pod's traffic is never without a redirect that the
// namespace held before, as with one iptables-restore; and the rules are
// those the node's own release writes, which its iptables-save prints
// right (Write). Errors are Write's, or errChanged when a commit came
// between the read and the transaction bound to it every time.
func Replace(rs *iptables.Ruleset, l Layout) error {
	if _, _, err := encode(rs, l); err != nil {
		return err // unsupported: nothing sent, not even a read
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.close()
	for range readAttempts {
		gen, held, err := c.heldOurs(nfproto(rs.Family))
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return err
		}
		msgs, ops, err := replacement(rs, l, held)
		if err != nil {
			return err
		}
		if err := c.transactAt(gen, msgs, ops); !errors.Is(err, unix.ERESTART) {
			return err
		}
	}
	return fmt.Errorf("%s: the namespace's rules changed under every read: %w", rs.Family, errChanged)
}

// heldXtables is what of a family's iptables tables a replacement removes
// or keeps: by table, the chains held (the built-in ones only if they
// hook), and our rules in chains not ours, by handle.
type heldXtables struct {
	chains map[string]map[string]bool
	ours   []ourRule
}

// ourRule names one rule of ours to delete.
type ourRule struct {
	table, chain string
	handle       uint64
}

// xtablesTables are the tables iptables-nft makes: a table of another name
// in the family is not iptables' (iptables-save does not print it), and
// nothing in it is ours.
var xtablesTables = []string{"filter", iptables.TableNat, iptables.TableMangle, iptables.TableRaw, "security"}

// heldOurs dumps the family's chains and rules between two reads of the
// generation, which it returns.
func (c *conn) heldOurs(family uint8) (uint32, heldXtables, error) {
	gen, err := c.generation()
	if err != nil {
		return 0, heldXtables{}, err
	}
	chains, err := c.dump(unix.NFT_MSG_GETCHAIN, family)
	if err != nil {
		return 0, heldXtables{}, fmt.Errorf("dumping chains: %w", err)
	}
	rules, err := c.dump(unix.NFT_MSG_GETRULE, family)
	if err != nil {
		return 0, heldXtables{}, fmt.Errorf("dumping rules: %w", err)
	}
	if after, err := c.generation(); err != nil {
		return 0, heldXtables{}, err
	} else if after != gen {
		return 0, heldXtables{}, errChanged
	}
	return gen, heldOf(chains, rules), nil
}

// heldOf is the pure part of heldOurs: the dumps' replies in.
func heldOf(chains, rules [][]byte) heldXtables {
	h := heldXtables{chains: map[string]map[string]bool{}}
	for _, d := range chains {
		table, chain := stringAttr(d, unix.NFTA_CHAIN_TABLE), stringAttr(d, unix.NFTA_CHAIN_NAME)
		if !slices.Contains(xtablesTables, table) {
			continue
		}
		if _, builtin := baseChains[table][chain]; builtin && attrValue(parseAttrs(d), unix.NFTA_CHAIN_HOOK) == nil {
			// A regular chain with a built-in one's name: declaring
			// the hook makes the kernel refuse, never write into it.
			continue
		}
		if h.chains[table] == nil {
			h.chains[table] = map[string]bool{}
		}
		h.chains[table][chain] = true
	}
	for _, d := range rules {
		var r ourRule
		var exprs []byte
		for _, a := range parseAttrs(d) {
			switch a.typ {
			case unix.NFTA_RULE_TABLE:
				r.table = string(trimNul(a.value))
			case unix.NFTA_RULE_CHAIN:
				r.chain = string(trimNul(a.value))
			case unix.NFTA_RULE_HANDLE:
				if len(a.value) == 8 {
					r.handle = binary.BigEndian.Uint64(a.value)
				}
			case unix.NFTA_RULE_EXPRESSIONS:
				exprs = a.value
			}
		}
		if !slices.Contains(xtablesTables, r.table) || iptables.Owned(r.chain) || r.handle == 0 {
			continue // our chains go whole
		}
		if ruleIsOurs(exprs) {
			h.ours = append(h.ours, r)
		}
	}
	return h
}

// ruleIsOurs says what iptables' Plan says of a rule in a chain not ours
// (iptables.ours): it jumps, or goes, into one of our chains, or carries
// our tag in a comment match (iptables-nft 1.8.7 to 1.8.13 keep comments
// so; a rule of ours this misses, the read-back after Replace finds).
func ruleIsOurs(exprs []byte) bool {
	for _, elem := range parseAttrs(exprs) {
		var name string
		var data []byte
		for _, a := range parseAttrs(elem.value) {
			switch a.typ {
			case unix.NFTA_EXPR_NAME:
				name = string(trimNul(a.value))
			case unix.NFTA_EXPR_DATA:
				data = a.value
			}
		}
		switch name {
		case "immediate":
			verdict := attrValue(parseAttrs(attrValue(parseAttrs(data), unix.NFTA_IMMEDIATE_DATA)), unix.NFTA_DATA_VERDICT)
			if iptables.Owned(string(trimNul(attrValue(parseAttrs(verdict), unix.NFTA_VERDICT_CHAIN)))) {
				return true
			}
		case "match":
			as := parseAttrs(data)
			if string(trimNul(attrValue(as, unix.NFTA_MATCH_NAME))) == "comment" && commentIsTag(attrValue(as, unix.NFTA_MATCH_INFO)) {
				return true
			}
		}
	}
	return false
}

// commentIsTag: a comment (NUL-padded) that is exactly our tag.
func commentIsTag(b []byte) bool {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b) == iptables.RuleTag
}

// replacement is the transaction Replace sends: our rules in other chains
// deleted, our chains flushed then deleted (so that no jump is left
// into one), then the ruleset written as Write writes it onto the
// built-in chains that are there.
func replacement(rs *iptables.Ruleset, l Layout, held heldXtables) ([]msg, []func() string, error) {
	family := nfproto(rs.Family)
	var msgs []msg
	var ops []func() string
	add := func(typ uint16, op func() string, fill func(*attrs)) {
		a := attrs{b: make([]byte, 0, 64)}
		fill(&a)
		msgs = append(msgs, msg{typ: typ, family: family, attrs: a.b})
		ops = append(ops, func() string { return rs.Family.String() + " " + op() })
	}
	for _, r := range held.ours {
		add(unix.NFT_MSG_DELRULE, func() string { return fmt.Sprintf("deleting rule %d of -t %s %s", r.handle, r.table, r.chain) }, func(a *attrs) {
			a.str(unix.NFTA_RULE_TABLE, r.table)
			a.str(unix.NFTA_RULE_CHAIN, r.chain)
			a.u64(unix.NFTA_RULE_HANDLE, r.handle)
		})
	}
	var owned [][2]string
	for _, table := range xtablesTables {
		for chain := range held.chains[table] {
			if iptables.Owned(chain) {
				owned = append(owned, [2]string{table, chain})
			}
		}
	}
	slices.SortFunc(owned, func(a, b [2]string) int { return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1])) })
	for _, tc := range owned {
		add(unix.NFT_MSG_DELRULE, func() string { return "flushing chain " + tc[0] + " " + tc[1] }, func(a *attrs) {
			a.str(unix.NFTA_RULE_TABLE, tc[0])
			a.str(unix.NFTA_RULE_CHAIN, tc[1])
		})
	}
	for _, tc := range owned {
		add(unix.NFT_MSG_DELCHAIN, func() string { return "deleting chain " + tc[0] + " " + tc[1] }, func(a *attrs) {
			a.str(unix.NFTA_CHAIN_TABLE, tc[0])
			a.str(unix.NFTA_CHAIN_NAME, tc[1])
		})
	}
	more, moreOps, err := encodeOnto(rs, l, held.chains)
	if err != nil {
		return nil, nil, err
	}
	return append(msgs, more...), append(ops, moreOps...), nil
}
