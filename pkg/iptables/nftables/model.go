// Package nftables turns a typed redirect spec into upstream Istio's
// native nftables ruleset for a sidecar pod (global.nativeNftables): three
// inet tables, istio-proxy-nat, -mangle and -raw. It is pure, like
// pkg/iptables: the model renders the commands upstream's transaction
// holds (its goldens are the oracle) and, in each chain's final order, the
// rules the netlink writer (pkg/iptables/nfnl) sends and the audit and
// inspect compare against.
package nftables

import (
	"strconv"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// The tables and chains upstream's sidecar ruleset uses. Every table is
// in the inet family: one table holds both IPv4 and IPv6 rules.
const (
	TableNat    = "istio-proxy-nat"
	TableMangle = "istio-proxy-mangle"
	TableRaw    = "istio-proxy-raw"

	Prerouting     = "prerouting"
	Output         = "output"
	ChainInbound   = "istio-inbound"
	ChainOutput    = "istio-output"
	ChainOutputDNS = "istio-output-dns"
	ChainRedirect  = "istio-redirect"
	ChainInRedir   = "istio-in-redirect"
	ChainDivert    = "istio-divert"
	ChainTProxy    = "istio-tproxy"
	ChainDrop      = "istio-drop"
)

// Tables are the tables this product owns, in the order they are written;
// DEL deletes whichever exist.
var Tables = []string{TableNat, TableMangle, TableRaw}

// Base is a base chain's hook: nat, filter or route; prerouting or output;
// and its priority (-100 dstnat, -150 mangle, -300 raw).
type Base struct {
	Type     string
	Hook     string
	Priority int32
}

// Chain is one chain of a table; Base is nil for a regular chain.
type Chain struct {
	Name string
	Base *Base
}

// Rule is one rule as upstream's transaction adds it: appended to Chain,
// or, when Insert is set, inserted before the rule at Index.
type Rule struct {
	Chain  string
	Insert bool
	Index  int
	Exprs  []Expr
}

// Text is the rule's body as nft reads it.
func (r Rule) Text() string {
	var w []string
	for _, e := range r.Exprs {
		w = append(w, e.words()...)
	}
	return strings.Join(w, " ")
}

// Table is one inet table: its chains (only those with rules, in
// upstream's order) and its rules in the order they are added.
type Table struct {
	Name   string
	Chains []Chain
	Rules  []Rule
}

// Ruleset is everything a pod's network namespace must hold: the tables
// that have rules, nat first.
type Ruleset struct {
	Tables []Table
	// Route is the policy routing TPROXY needs, or nil.
	Route *iptables.PolicyRoute
}

// Commands renders the ruleset as upstream's transaction (knftables) does
// and its goldens hold it: add and flush each table, add its chains, then
// each rule.
func (rs *Ruleset) Commands() string {
	var b strings.Builder
	for _, t := range rs.Tables {
		b.WriteString("add table inet " + t.Name + "\n")
		b.WriteString("flush table inet " + t.Name + "\n")
		for _, c := range t.Chains {
			b.WriteString("add chain inet " + t.Name + " " + c.Name)
			if c.Base != nil {
				b.WriteString(" { type " + c.Base.Type + " hook " + c.Base.Hook +
					" priority " + strconv.Itoa(int(c.Base.Priority)) + " ; }")
			}
			b.WriteString("\n")
		}
		for _, r := range t.Rules {
			if r.Insert {
				b.WriteString("insert rule inet " + t.Name + " " + r.Chain + " index " + strconv.Itoa(r.Index) + " " + r.Text() + "\n")
				continue
			}
			b.WriteString("add rule inet " + t.Name + " " + r.Chain + " " + r.Text() + "\n")
		}
	}
	return b.String()
}

// Ordered returns each chain's rules in the order the kernel holds them
// once the commands ran: an insert goes before the rule then at its index.
func (t *Table) Ordered() map[string][]Rule {
	out := map[string][]Rule{}
	for _, r := range t.Rules {
		rules := out[r.Chain]
		if !r.Insert {
			out[r.Chain] = append(rules, r)
			continue
		}
		out[r.Chain] = append(rules[:r.Index:r.Index], append([]Rule{r}, rules[r.Index:]...)...)
	}
	return out
}

// Listing is the ruleset in its final order, one line per chain and rule,
// as `inspect` shows it and tests compare it.
func (rs *Ruleset) Listing() []string {
	var out []string
	for _, t := range rs.Tables {
		out = append(out, "table inet "+t.Name)
		ordered := t.Ordered()
		for _, c := range t.Chains {
			head := "  chain " + c.Name
			if c.Base != nil {
				head += " { type " + c.Base.Type + " hook " + c.Base.Hook + " priority " + strconv.Itoa(int(c.Base.Priority)) + " }"
			}
			out = append(out, head)
			for _, r := range ordered[c.Name] {
				out = append(out, "    "+r.Text())
			}
		}
	}
	return out
}
