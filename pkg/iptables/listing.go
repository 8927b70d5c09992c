package iptables

import (
	"slices"
	"strings"
)

func sortChains(chains []string) {
	slices.SortStableFunc(chains, func(a, b string) int {
		if d := chainRank(a) - chainRank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
}

// chainRank orders built-in chains as iptables-save prints them, before
// any user chain.
func chainRank(c string) int {
	if i := slices.Index([]string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}, c); i >= 0 {
		return i
	}
	return 10
}

// Listing is a ruleset as "table -A CHAIN spec" lines in iptables-save's
// order: by table, the built-in chains first, then ours by name, each
// chain's rules in order. It is what inspect prints as the rules a pod
// should have, next to OursListing of what it has.
func (rs *Ruleset) Listing() []string {
	var out []string
	for _, table := range planTables(rs, nil) {
		var chains []string
		byChain := map[string][]string{}
		for _, r := range rs.Rules {
			if r.Table != table {
				continue
			}
			if _, seen := byChain[r.Chain]; !seen {
				chains = append(chains, r.Chain)
			}
			byChain[r.Chain] = append(byChain[r.Chain], table+" -A "+r.Chain+" "+r.Args())
		}
		sortChains(chains)
		for _, c := range chains {
			out = append(out, byChain[c]...)
		}
	}
	return out
}

// OursListing lists what the tables hold of ours in the same form: every
// rule of our chains and our rules in other chains.
func (o *Observed) OursListing() []string {
	if o == nil {
		return nil
	}
	var tables []string
	for t := range o.Tables {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	var out []string
	for _, table := range tables {
		t := o.Tables[table]
		chains := slices.Clone(t.Chains)
		sortChains(chains)
		for _, chain := range chains {
			for _, spec := range t.Rules[chain] {
				if Owned(chain) || ours(spec) {
					out = append(out, table+" -A "+chain+" "+spec)
				}
			}
		}
	}
	return out
}
