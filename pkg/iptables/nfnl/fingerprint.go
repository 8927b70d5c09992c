package nfnl

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"slices"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// Fingerprint identifies, as the kernel holds it, everything in one
// family of a namespace that a check of the rule model reads: every table
// that holds one of our chains, or a rule elsewhere that names one or
// carries our tag (iptables.RuleTag), with all its chains and rules, ours
// and others' (iptables-save prints a table only if all of it is what
// iptables writes). Handles, positions, use counts and counter values are
// left out; tables that hold nothing of ours are not part of it.
//
// Two states with one fingerprint print alike in any one iptables-save,
// as far as a check of the model can see: a state iptables-save was once
// seen to print as the model (pkg/iptables/xtables.Confirmed) need not be
// printed again. The converse does not hold: one model's rules written by
// two iptables releases print alike with two fingerprints.
type Fingerprint [sha256.Size]byte

// readAttempts bounds the reads taken again because a commit came
// between them (a busy namespace): a fingerprint's dumps, a native read
// back, a native write's read of our tables.
const readAttempts = 3

// ReadFingerprint takes a family's Fingerprint in the calling thread's
// network namespace, and the ruleset generation it is of. Its dumps are
// one state of the namespace: they are taken again if the generation moved
// while they were taken.
func ReadFingerprint(f iptables.Family) (Fingerprint, uint32, error) {
	c, err := dial()
	if err != nil {
		return Fingerprint{}, 0, err
	}
	defer c.close()
	for range readAttempts - 1 {
		fp, gen, err := c.fingerprint(nfproto(f))
		if !errors.Is(err, errChanged) {
			return fp, gen, err
		}
	}
	return c.fingerprint(nfproto(f))
}

func nfproto(f iptables.Family) uint8 {
	if f == iptables.IPv6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// fingerprint dumps the family's tables, chains and rules between two
// reads of the generation, and hashes what of them is ours.
func (c *conn) fingerprint(family uint8) (Fingerprint, uint32, error) {
	gen, err := c.generation()
	if err != nil {
		return Fingerprint{}, 0, err
	}
	var dumps [3][][]byte
	for i, typ := range []uint16{unix.NFT_MSG_GETTABLE, unix.NFT_MSG_GETCHAIN, unix.NFT_MSG_GETRULE} {
		if dumps[i], err = c.dump(typ, family); err != nil {
			return Fingerprint{}, 0, err
		}
	}
	if after, err := c.generation(); err != nil {
		return Fingerprint{}, 0, err
	} else if after != gen {
		return Fingerprint{}, 0, errChanged
	}
	return fingerprintOf(dumps[0], dumps[1], dumps[2]), gen, nil
}

// kind says how one kind of object's attributes are read: which name its
// table and chain (0: none), which holds its expressions (0: none), and
// which name its identity or usage, never hashed.
type kind struct {
	table, chain, exprs uint16
	volatile            map[uint16]bool
}

var (
	tableKind = kind{table: unix.NFTA_TABLE_NAME,
		volatile: map[uint16]bool{unix.NFTA_TABLE_USE: true, nftaTableHandle: true}}
	chainKind = kind{table: unix.NFTA_CHAIN_TABLE, chain: unix.NFTA_CHAIN_NAME,
		volatile: map[uint16]bool{unix.NFTA_CHAIN_HANDLE: true, unix.NFTA_CHAIN_USE: true, unix.NFTA_CHAIN_COUNTERS: true}}
	ruleKind = kind{table: unix.NFTA_RULE_TABLE, chain: unix.NFTA_RULE_CHAIN, exprs: unix.NFTA_RULE_EXPRESSIONS,
		volatile: map[uint16]bool{unix.NFTA_RULE_HANDLE: true, unix.NFTA_RULE_POSITION: true}}
)

// section is what a fingerprint holds of one chain: its attributes and
// its rules in order.
type section struct {
	table, chain string
	attrs        []byte // the chain's, without volatile ones; nil: not dumped
	rules        [][]byte
}

// fingerprintOf is the pure part of ReadFingerprint: the dumps' replies
// in, the hash out.
func fingerprintOf(tables, chains, rules [][]byte) Fingerprint {
	type normalized struct {
		table, chain string
		attrs        []byte
	}
	ruleList := make([]normalized, 0, len(rules))
	ours := map[string]bool{} // tables holding anything of ours
	for _, d := range rules {
		table, chain, norm := ruleKind.normalize(d)
		ruleList = append(ruleList, normalized{table, chain, norm})
		if iptables.Owned(chain) || mentionsOurs(d) {
			ours[table] = true
		}
	}
	chainList := make([]normalized, 0, len(chains))
	for _, d := range chains {
		table, chain, norm := chainKind.normalize(d)
		chainList = append(chainList, normalized{table, chain, norm})
		if iptables.Owned(chain) {
			ours[table] = true
		}
	}
	sections := map[[2]string]*section{}
	get := func(table, chain string) *section {
		k := [2]string{table, chain}
		if sections[k] == nil {
			sections[k] = &section{table: table, chain: chain}
		}
		return sections[k]
	}
	for _, r := range ruleList {
		if ours[r.table] {
			s := get(r.table, r.chain)
			s.rules = append(s.rules, r.attrs)
		}
	}
	for _, c := range chainList {
		if ours[c.table] {
			get(c.table, c.chain).attrs = c.attrs
		}
	}
	tableAttrs := map[string][]byte{}
	for _, d := range tables {
		table, _, norm := tableKind.normalize(d)
		tableAttrs[table] = norm
	}
	ordered := make([]*section, 0, len(sections))
	for _, s := range sections {
		ordered = append(ordered, s)
	}
	slices.SortFunc(ordered, func(a, b *section) int {
		return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(a.chain, b.chain))
	})
	h := sha256.New()
	lastTable := ""
	for i, s := range ordered {
		if i == 0 || s.table != lastTable {
			lastTable = s.table
			field(h, 't', []byte(s.table))
			field(h, 'T', tableAttrs[s.table]) // nil (absent) differs from empty
		}
		field(h, 'c', []byte(s.chain))
		field(h, 'C', s.attrs)
		for _, r := range s.rules {
			field(h, 'r', r)
		}
	}
	var fp Fingerprint
	h.Sum(fp[:0])
	return fp
}

// field hashes one length-prefixed value; a nil value hashes apart from
// an empty one.
func field(h hash.Hash, kind byte, v []byte) {
	var hdr [9]byte
	hdr[0] = kind
	n := uint64(len(v)) + 1
	if v == nil {
		n = 0
	}
	binary.BigEndian.PutUint64(hdr[1:], n)
	h.Write(hdr[:])
	h.Write(v)
}

// normalize returns an object's attributes without the volatile ones, its
// expressions' counters without their values, and its table's and
// chain's names.
func (k kind) normalize(b []byte) (table, chain string, out []byte) {
	out = []byte{}
	for _, at := range parseAttrs(b) {
		if k.volatile[at.typ] {
			continue
		}
		v := at.value
		switch {
		case at.typ == k.table:
			table = string(trimNul(v))
		case k.chain != 0 && at.typ == k.chain:
			chain = string(trimNul(v))
		case k.exprs != 0 && at.typ == k.exprs:
			v = withoutCounts(v)
		}
		out = binary.BigEndian.AppendUint16(out, at.typ)
		out = binary.BigEndian.AppendUint32(out, uint32(len(v))) // #nosec G115 -- an attribute is under 64 KiB
		out = append(out, v...)
	}
	return table, chain, out
}

// withoutCounts is a rule's expressions with every counter's values
// dropped: traffic moves them.
func withoutCounts(b []byte) []byte {
	var out []byte
	for _, elem := range parseAttrs(b) {
		isCounter := false
		for _, a := range parseAttrs(elem.value) {
			if a.typ == unix.NFTA_EXPR_NAME && string(trimNul(a.value)) == "counter" {
				isCounter = true
			}
		}
		if isCounter {
			out = append(out, 0, 0, 0, 0) // no other element is empty
			continue
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(elem.value))) // #nosec G115 -- an attribute is under 64 KiB
		out = append(out, elem.value...)
	}
	return out
}

// mentionsOurs: a rule whose encoding holds our chain prefix (a jump into
// one of our chains names it) or our tag (a comment holds it) may be one
// of ours, which is all a check needs: its table is then in the
// fingerprint, whole.
func mentionsOurs(rule []byte) bool {
	return bytes.Contains(rule, []byte(iptables.ChainPrefix)) || bytes.Contains(rule, []byte(iptables.RuleTag))
}
