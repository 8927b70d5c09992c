package nfnl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// DiffNative compares our tables in the calling thread's network
// namespace with what WriteNative writes for rs (nil: none of them), and
// returns the differences, one readable line each; none means the kernel
// holds exactly those tables, chains and rules. Rules compare by their
// expressions as the kernel holds them, with counters' values, handles
// and anonymous sets' names left out (a set compares by its elements).
// Tables other than ours are not read.
func DiffNative(rs *nftables.Ruleset) ([]string, error) {
	want, held, err := plannedAndHeld(rs)
	if err != nil {
		return nil, err
	}
	return diffNative(want, held), nil
}

// plannedAndHeld is what WriteNative writes for rs and what the kernel
// holds of our tables now.
func plannedAndHeld(rs *nftables.Ruleset) (map[string]*plannedTable, map[string]*heldTable, error) {
	want, err := planNative(rs)
	if err != nil {
		return nil, nil, err
	}
	held, err := readHeld()
	return want, held, err
}

// readHeld reads our tables once nothing commits during the read, at
// most readAttempts times.
func readHeld() (map[string]*heldTable, error) {
	c, err := dial()
	if err != nil {
		return nil, err
	}
	defer c.close()
	held, err := c.readNative()
	for range readAttempts - 1 {
		if !errors.Is(err, errChanged) {
			break
		}
		held, err = c.readNative()
	}
	if err != nil {
		return nil, fmt.Errorf("reading the inet tables: %w", err)
	}
	return held, nil
}

// heldTable is one of our tables as the kernel dumps it.
type heldTable struct {
	flags  uint32             // NFT_TABLE_F_*: dormant, owned
	chains []heldChain        // in the kernel's order
	sets   map[string]heldSet // by name
}

type heldChain struct {
	name  string
	base  string // chainBase's rendering; "" for a regular chain
	rules []heldRule
}

type heldRule struct {
	handle uint64
	exprs  []byte
	udata  []byte // a comment, which our rules have none of
}

type heldSet struct {
	attrs []attr
	elems [][]byte // each element's key
}

// readNative dumps our inet tables, their chains, rules and sets, and
// each set's elements, between two reads of the generation: errChanged
// when a commit came between.
func (c *conn) readNative() (map[string]*heldTable, error) {
	gen, err := c.generation()
	if err != nil {
		return nil, err
	}
	var dumps [4][][]byte
	for i, what := range []struct {
		typ  uint16
		name string
	}{{unix.NFT_MSG_GETTABLE, "tables"}, {unix.NFT_MSG_GETCHAIN, "chains"}, {unix.NFT_MSG_GETRULE, "rules"}, {unix.NFT_MSG_GETSET, "sets"}} {
		if dumps[i], err = c.dump(what.typ, unix.NFPROTO_INET); err != nil {
			return nil, fmt.Errorf("dumping %s: %w", what.name, err)
		}
	}
	held := map[string]*heldTable{}
	for _, d := range dumps[0] {
		if name, ok := ourTable(d); ok {
			flags := u32Of(attrValue(parseAttrs(d), unix.NFTA_TABLE_FLAGS))
			held[name] = &heldTable{flags: flags, sets: map[string]heldSet{}}
		}
	}
	for _, d := range dumps[1] {
		if t := held[stringAttr(d, unix.NFTA_CHAIN_TABLE)]; t != nil {
			t.chains = append(t.chains, heldChainOf(d))
		}
	}
	for _, d := range dumps[2] {
		if err := addHeldRule(held, d); err != nil {
			return nil, err
		}
	}
	for _, d := range dumps[3] {
		table, name := stringAttr(d, unix.NFTA_SET_TABLE), stringAttr(d, unix.NFTA_SET_NAME)
		if t := held[table]; t != nil {
			elems, err := c.setElems(table, name)
			if err != nil {
				return nil, c.changedOr(gen, fmt.Errorf("dumping the elements of set %s of table inet %s: %w", name, table, err))
			}
			t.sets[name] = heldSet{attrs: parseAttrs(d), elems: elems}
		}
	}
	return held, c.changedOr(gen, nil)
}

// changedOr is errChanged if the generation moved from gen, else err.
func (c *conn) changedOr(gen uint32, err error) error {
	after, gerr := c.generation()
	switch {
	case gerr != nil:
		return errors.Join(err, gerr)
	case after != gen:
		return errChanged
	}
	return err
}

func stringAttr(b []byte, typ uint16) string {
	return string(trimNul(attrValue(parseAttrs(b), typ)))
}

func heldChainOf(d []byte) heldChain {
	var c heldChain
	var typ string
	var hook []attr
	policy := uint32(nfAccept)
	for _, a := range parseAttrs(d) {
		switch a.typ {
		case unix.NFTA_CHAIN_NAME:
			c.name = string(trimNul(a.value))
		case unix.NFTA_CHAIN_TYPE:
			typ = string(trimNul(a.value))
		case unix.NFTA_CHAIN_HOOK:
			hook = parseAttrs(a.value)
		case unix.NFTA_CHAIN_POLICY:
			policy = u32Of(a.value)
		}
	}
	if hook == nil {
		return c
	}
	num, prio := ^uint32(0), uint32(0)
	for _, a := range hook {
		switch a.typ {
		case unix.NFTA_HOOK_HOOKNUM:
			num = u32Of(a.value)
		case unix.NFTA_HOOK_PRIORITY:
			prio = u32Of(a.value)
		}
	}
	c.base = chainBase(typ, num, int32(prio), policy) // #nosec G115 -- the kernel's signed priority
	return c
}

// chainBase renders a base chain's declaration in nft's words, the
// priority as a number.
func chainBase(typ string, hook uint32, prio int32, policy uint32) string {
	name := fmt.Sprintf("hook#%d", hook)
	for n, num := range hookNums {
		if num == hook {
			name = n
		}
	}
	pol := fmt.Sprintf("policy#%d", policy)
	switch policy {
	case nfAccept:
		pol = "policy accept"
	case nfDrop:
		pol = "policy drop"
	}
	return fmt.Sprintf("type %s hook %s priority %d; %s", typ, name, prio, pol)
}

func u32Of(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func addHeldRule(held map[string]*heldTable, d []byte) error {
	var table, chain string
	var r heldRule
	for _, a := range parseAttrs(d) {
		switch a.typ {
		case unix.NFTA_RULE_TABLE:
			table = string(trimNul(a.value))
		case unix.NFTA_RULE_CHAIN:
			chain = string(trimNul(a.value))
		case unix.NFTA_RULE_HANDLE:
			if len(a.value) == 8 {
				r.handle = binary.BigEndian.Uint64(a.value)
			}
		case unix.NFTA_RULE_EXPRESSIONS:
			r.exprs = a.value
		case unix.NFTA_RULE_USERDATA:
			r.udata = a.value
		}
	}
	t := held[table]
	if t == nil {
		return nil
	}
	for i := range t.chains {
		if t.chains[i].name == chain {
			t.chains[i].rules = append(t.chains[i].rules, r)
			return nil
		}
	}
	// Chains are dumped before rules, in one generation.
	return fmt.Errorf("rule %d of table inet %s is in chain %s, which was not dumped: %w", r.handle, table, chain, errChanged)
}

// setElems dumps one set's elements' keys.
func (c *conn) setElems(table, set string) ([][]byte, error) {
	var req attrs
	req.str(unix.NFTA_SET_ELEM_LIST_TABLE, table)
	req.str(unix.NFTA_SET_ELEM_LIST_SET, set)
	msgs, err := c.request(unix.NFT_MSG_GETSETELEM, unix.NFPROTO_INET, unix.NLM_F_DUMP, req.b)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	for _, m := range msgs {
		for _, l := range parseAttrs(m) {
			if l.typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			for _, e := range parseAttrs(l.value) {
				for _, k := range parseAttrs(e.value) {
					if k.typ == unix.NFTA_SET_ELEM_KEY {
						keys = append(keys, attrValue(parseAttrs(k.value), unix.NFTA_DATA_VALUE))
					}
				}
			}
		}
	}
	return keys, nil
}
