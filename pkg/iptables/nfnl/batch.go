package nfnl

import (
	"fmt"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// baseChain is how iptables-nft declares a built-in chain of a table.
type baseChain struct {
	hook     uint32
	priority int32
	typ      string
}

// baseChains are the built-in chains the rule model uses, with the hook,
// priority and type iptables-nft gives them (iptables/nft.c).
var baseChains = map[string]map[string]baseChain{
	iptables.TableNat: {
		iptables.Prerouting: {unix.NF_INET_PRE_ROUTING, -100, "nat"},
		iptables.Output:     {unix.NF_INET_LOCAL_OUT, -100, "nat"},
	},
	iptables.TableMangle: {
		iptables.Prerouting: {unix.NF_INET_PRE_ROUTING, -150, "filter"},
		iptables.Output:     {unix.NF_INET_LOCAL_OUT, -150, "route"},
	},
	iptables.TableRaw: {
		iptables.Prerouting: {unix.NF_INET_PRE_ROUTING, -300, "filter"},
		iptables.Output:     {unix.NF_INET_LOCAL_OUT, -300, "filter"},
	},
}

// encode turns a ruleset into the messages of one transaction, in the
// order iptables-nft-restore sends them for Plan's fresh-namespace input:
// per table (sorted, as Plan sorts them) the table, its chains in
// declaration order, then the rules in order, each built-in chain created
// just before its first rule. Our chains are created exclusively: a
// namespace that already holds one is not fresh, and the whole
// transaction fails rather than merge into it. ops names each message for
// errors, rendered only for one the kernel refuses.
func encode(rs *iptables.Ruleset, l Layout) (msgs []msg, ops []func() string, err error) {
	return encodeOnto(rs, l, nil)
}

// encodeOnto is encode for a namespace whose built-in chains in held
// (table, then chain; nil: none) exist: those are left as they are, as
// iptables-nft-restore leaves them, not declared again (which would
// reset the counters 1.8.10 and later give them).
func encodeOnto(rs *iptables.Ruleset, l Layout, held map[string]map[string]bool) (msgs []msg, ops []func() string, err error) {
	if l.release == "" {
		return nil, nil, fmt.Errorf("no iptables release to lay the rules out as: %w", ErrUnsupported)
	}
	family := uint8(unix.NFPROTO_IPV4)
	if rs.Family == iptables.IPv6 {
		family = unix.NFPROTO_IPV6
	}
	add := func(typ, flags uint16, op func() string, fill func(*attrs)) {
		a := attrs{b: make([]byte, 0, 256)}
		fill(&a)
		msgs = append(msgs, msg{typ: typ, flags: flags, family: family, attrs: a.b})
		ops = append(ops, func() string { return rs.Family.String() + " " + op() })
	}
	for _, table := range rs.Tables() {
		bases, ok := baseChains[table]
		if !ok {
			return nil, nil, fmt.Errorf("table %s: %w", table, ErrUnsupported)
		}
		add(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, func() string { return "table " + table }, func(a *attrs) {
			a.str(unix.NFTA_TABLE_NAME, table)
		})
		for _, c := range rs.Chains {
			if c.Table != table {
				continue
			}
			if _, builtin := bases[c.Name]; builtin {
				return nil, nil, fmt.Errorf("declared chain %s is built in: %w", c.Name, ErrUnsupported)
			}
			add(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE|unix.NLM_F_EXCL, func() string { return "chain " + table + " " + c.Name }, func(a *attrs) {
				a.str(unix.NFTA_CHAIN_TABLE, table)
				a.str(unix.NFTA_CHAIN_NAME, c.Name)
			})
		}
		made := map[string]bool{}
		for i, ir := range rs.Rules {
			if ir.Table != table {
				continue
			}
			if b, builtin := bases[ir.Chain]; builtin && !made[ir.Chain] && !held[table][ir.Chain] {
				// No policy: a new chain's is accept, and an existing
				// one keeps its own, as with iptables-restore.
				made[ir.Chain] = true
				add(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, func() string { return "chain " + table + " " + ir.Chain }, func(a *attrs) {
					a.str(unix.NFTA_CHAIN_TABLE, table)
					a.str(unix.NFTA_CHAIN_NAME, ir.Chain)
					a.nest(unix.NFTA_CHAIN_HOOK, func(h *attrs) {
						h.u32(unix.NFTA_HOOK_HOOKNUM, b.hook)
						h.u32(unix.NFTA_HOOK_PRIORITY, uint32(b.priority)) // #nosec G115 -- the kernel reads it back as the signed priority
					})
					a.str(unix.NFTA_CHAIN_TYPE, b.typ)
					if l.baseCounters {
						a.nest(unix.NFTA_CHAIN_COUNTERS, func(c *attrs) {
							c.u64(unix.NFTA_COUNTER_PACKETS, 0)
							c.u64(unix.NFTA_COUNTER_BYTES, 0)
						})
					}
				})
			}
			r, err := encodeRule(rs.Family, ir, l)
			if err != nil {
				return nil, nil, fmt.Errorf("rule %d (-A %s %s): %w", i+1, ir.Chain, ir.Args(), err)
			}
			add(unix.NFT_MSG_NEWRULE, unix.NLM_F_CREATE|unix.NLM_F_APPEND, func() string { return fmt.Sprintf("rule -t %s -A %s %s", table, ir.Chain, ir.Args()) }, func(a *attrs) {
				a.str(unix.NFTA_RULE_TABLE, table)
				a.str(unix.NFTA_RULE_CHAIN, ir.Chain)
				a.bytes(unix.NFTA_RULE_EXPRESSIONS|nlaFNested, r.exprs.b)
				if r.proto != 0 {
					// The protocol -p set, for the x_tables
					// extensions that check it (TPROXY, multiport).
					a.nest(unix.NFTA_RULE_COMPAT, func(c *attrs) {
						c.u32(unix.NFTA_RULE_COMPAT_PROTO, uint32(r.proto))
						c.u32(unix.NFTA_RULE_COMPAT_FLAGS, 0)
					})
				}
			})
		}
	}
	return msgs, ops, nil
}

// Write adds a family's ruleset to the calling thread's network namespace
// in one nf_tables transaction, laid out as the node's iptables-nft
// release writes it (l), so the node's iptables-save prints it as its
// iptables-restore's. It is for a namespace that holds none of the ruleset's own chains: otherwise, as
// when the kernel refuses anything, nothing is written and the error says
// why. An error wrapping ErrUnsupported means nothing was sent; one
// wrapping ErrUnknownOutcome that the replies were lost, so the namespace
// must be read to know.
func Write(rs *iptables.Ruleset, l Layout) error {
	msgs, ops, err := encode(rs, l)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.close()
	return c.transact(msgs, ops)
}
