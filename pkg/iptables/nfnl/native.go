package nfnl

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// WriteNative makes the calling thread's network namespace hold exactly
// the ruleset's tables (upstream Istio's native nftables ruleset, pkg
// nftables), in one nf_tables transaction, whatever was there before:
// each of nftables.Tables the namespace holds is deleted, then written
// again if the ruleset has it. The rules are encoded as nft encodes their
// text, so `nft list ruleset` prints them as upstream's transaction leaves
// them. All or nothing: a refusal names the table, chain or rule it is of;
// an error wrapping ErrUnknownOutcome means the namespace must be read
// (DiffNative) to know.
func WriteNative(rs *nftables.Ruleset) error {
	tables, err := planNative(rs)
	if err != nil {
		return err
	}
	return replaceNative(tables)
}

// DeleteNative deletes whichever of nftables.Tables the calling thread's
// network namespace holds, in one transaction; none is no error.
func DeleteNative() error {
	return replaceNative(nil)
}

// replaceNative deletes the tables of ours the namespace holds and writes
// tables, in one transaction bound to the generation they were read at
// (NFNL_BATCH_GENID: a commit in between and the kernel refuses the batch
// whole, ERESTART). Kernels older than the attribute skip it: a race then
// fails the write (a table deleted in between) or merges into a table
// made in between, which the read-back finds (after a trusted write, the
// node agent's audit). Only tables found are
// deleted: a transaction that deletes tables often waits in the kernel
// (the batch that needs no read, last below, took 12-14 ms a write on the
// project's VM, where a pod's write alone takes 0.4 ms), and a pod's
// namespace holds none of ours at its ADD. A namespace that commits under
// every read gets, after readAttempts of them, that batch: each table
// made, then deleted, whether or not it was there.
func replaceNative(tables map[string]*plannedTable) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.close()
	for range readAttempts {
		gen, held, err := c.ourTables()
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return err
		}
		b := nativeBatchOf(tables, held)
		if len(b.msgs) == 0 {
			return nil
		}
		if err := c.transactAt(gen, b.msgs, b.ops); !errors.Is(err, unix.ERESTART) {
			return err
		}
	}
	b := nativeBatchOf(tables, nil)
	return c.transact(b.msgs, b.ops)
}

// nativeBatchOf deletes the tables held says the namespace holds (nil:
// unknown, so each of ours, made first so that the delete finds it) and
// writes tables.
func nativeBatchOf(tables map[string]*plannedTable, held map[string]bool) nativeBatch {
	var b nativeBatch
	for _, name := range nftables.Tables {
		switch {
		case held == nil:
			b.add(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, func() string { return "making table inet " + name + " to delete it" }, func(a *attrs) { a.str(unix.NFTA_TABLE_NAME, name) })
			b.deleteTable(name)
		case held[name]:
			b.deleteTable(name)
		}
		if t := tables[name]; t != nil {
			b.writeTable(t)
		}
	}
	return b
}

// ourTables is which of nftables.Tables the namespace holds, and the
// generation that read is of or precedes (a commit between the two makes
// a transaction bound to it fail, which is what a caller needs).
func (c *conn) ourTables() (uint32, map[string]bool, error) {
	gen, err := c.generation()
	if err != nil {
		return 0, nil, err
	}
	tables, err := c.dump(unix.NFT_MSG_GETTABLE, unix.NFPROTO_INET)
	if err != nil {
		return 0, nil, fmt.Errorf("dumping tables: %w", err)
	}
	held := map[string]bool{}
	for _, d := range tables {
		if name, ok := ourTable(d); ok {
			held[name] = true
		}
	}
	return gen, held, nil
}

// ourTable is a dumped table's name, if it is one of nftables.Tables.
func ourTable(d []byte) (string, bool) {
	name := stringAttr(d, unix.NFTA_TABLE_NAME)
	return name, slices.Contains(nftables.Tables, name)
}

// plannedTable is one table as WriteNative writes it: its chains in the
// model's order, each with its rules encoded, in their final order.
type plannedTable struct {
	name   string
	chains []plannedChain
}

type plannedChain struct {
	nftables.Chain
	rules []plannedRule
}

type plannedRule struct {
	text  string // nftables.Rule.Text, to name the rule
	exprs []byte // NFTA_RULE_EXPRESSIONS' elements
	sets  []anonSet
}

// planNative encodes a ruleset's tables by name; nil holds none. Set ids
// are numbered from 1 in the order the transaction adds the sets, as nft
// numbers them.
func planNative(rs *nftables.Ruleset) (map[string]*plannedTable, error) {
	out := map[string]*plannedTable{}
	if rs == nil {
		return out, nil
	}
	seen := map[string]bool{}
	for _, t := range rs.Tables {
		if !slices.Contains(nftables.Tables, t.Name) {
			return nil, fmt.Errorf("table inet %s: not one of %v", t.Name, nftables.Tables)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("table inet %s: twice in the ruleset", t.Name)
		}
		seen[t.Name] = true
	}
	var setID uint32
	next := func() uint32 { setID++; return setID }
	for _, name := range nftables.Tables {
		i := slices.IndexFunc(rs.Tables, func(t nftables.Table) bool { return t.Name == name })
		if i < 0 {
			continue
		}
		t, err := planTable(&rs.Tables[i], next)
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

func planTable(t *nftables.Table, nextSet func() uint32) (*plannedTable, error) {
	p := &plannedTable{name: t.Name}
	declared := map[string]bool{}
	for _, c := range t.Chains {
		if declared[c.Name] {
			return nil, fmt.Errorf("table inet %s: chain %s declared twice", t.Name, c.Name)
		}
		declared[c.Name] = true
		if c.Base != nil {
			if _, ok := hookNums[c.Base.Hook]; !ok {
				return nil, fmt.Errorf("table inet %s chain %s: unknown hook %q", t.Name, c.Name, c.Base.Hook)
			}
		}
	}
	for _, r := range t.Rules {
		if !declared[r.Chain] {
			return nil, fmt.Errorf("table inet %s: rule %q is in chain %s, which the table does not declare", t.Name, r.Text(), r.Chain)
		}
	}
	ordered := t.Ordered()
	for _, c := range t.Chains {
		pc := plannedChain{Chain: c}
		for _, r := range ordered[c.Name] {
			n, err := encodeNative(r, nextSet)
			if err != nil {
				return nil, fmt.Errorf("table inet %s chain %s rule %q: %w", t.Name, c.Name, r.Text(), err)
			}
			pc.rules = append(pc.rules, plannedRule{text: r.Text(), exprs: n.exprs.b, sets: n.sets})
		}
		p.chains = append(p.chains, pc)
	}
	return p, nil
}

// hookNums are the netfilter hooks of the inet family by nft's names.
var hookNums = map[string]uint32{
	"prerouting":  unix.NF_INET_PRE_ROUTING,
	"input":       unix.NF_INET_LOCAL_IN,
	"forward":     unix.NF_INET_FORWARD,
	"output":      unix.NF_INET_LOCAL_OUT,
	"postrouting": unix.NF_INET_POST_ROUTING,
}

// nativeBatch is the messages of one transaction in the inet family, each
// with what it does, for errors.
type nativeBatch struct {
	msgs []msg
	ops  []func() string
}

func (b *nativeBatch) add(typ, flags uint16, op func() string, fill func(*attrs)) {
	a := attrs{b: make([]byte, 0, 256)}
	fill(&a)
	b.msgs = append(b.msgs, msg{typ: typ, flags: flags, family: unix.NFPROTO_INET, attrs: a.b})
	b.ops = append(b.ops, op)
}

// deleteTable deletes a table the namespace holds.
func (b *nativeBatch) deleteTable(name string) {
	b.add(unix.NFT_MSG_DELTABLE, 0, func() string { return "deleting table inet " + name }, func(a *attrs) { a.str(unix.NFTA_TABLE_NAME, name) })
}

// writeTable adds a table as nft does for `add table`, `add chain` and
// `add rule` (the same attributes and flags), each chain's rules appended
// in their final order, every anonymous set just before its rule.
func (b *nativeBatch) writeTable(t *plannedTable) {
	b.add(unix.NFT_MSG_NEWTABLE, 0, func() string { return "table inet " + t.name }, func(a *attrs) {
		a.str(unix.NFTA_TABLE_NAME, t.name)
		a.u32(unix.NFTA_TABLE_FLAGS, 0)
	})
	for _, c := range t.chains {
		b.add(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, func() string { return "chain inet " + t.name + " " + c.Name }, func(a *attrs) {
			a.str(unix.NFTA_CHAIN_TABLE, t.name)
			a.str(unix.NFTA_CHAIN_NAME, c.Name)
			if c.Base == nil {
				return
			}
			// No policy: a new base chain's is accept, as nft leaves it.
			a.str(unix.NFTA_CHAIN_TYPE, c.Base.Type)
			a.nest(unix.NFTA_CHAIN_HOOK, func(h *attrs) {
				h.u32(unix.NFTA_HOOK_HOOKNUM, hookNums[c.Base.Hook])
				h.u32(unix.NFTA_HOOK_PRIORITY, uint32(c.Base.Priority)) // #nosec G115 -- the kernel reads it back as the signed priority
			})
		})
	}
	for _, c := range t.chains {
		for _, r := range c.rules {
			op := func() string { return fmt.Sprintf("rule inet %s %s %s", t.name, c.Name, r.text) }
			for _, s := range r.sets {
				setOp := func() string { return "the anonymous set of " + op() }
				b.add(unix.NFT_MSG_NEWSET, unix.NLM_F_CREATE, setOp, func(a *attrs) { s.setAttrs(a, t.name) })
				b.add(unix.NFT_MSG_NEWSETELEM, unix.NLM_F_CREATE, setOp, func(a *attrs) { s.elemAttrs(a, t.name) })
			}
			b.add(unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE|unix.NLM_F_APPEND, op, func(a *attrs) {
				a.str(unix.NFTA_RULE_TABLE, t.name)
				a.str(unix.NFTA_RULE_CHAIN, c.Name)
				a.bytes(unix.NFTA_RULE_EXPRESSIONS|nlaFNested, r.exprs)
			})
		}
	}
}
