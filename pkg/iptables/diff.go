package iptables

import (
	"fmt"
	"slices"
)

// Diff compares what a family must hold with what it holds and describes each
// difference; no differences means the rules are in place. Only our chains
// and our rules in built-in chains (see ours) are compared: other rules
// there (a primary CNI's, say) are not ours to judge.
func Diff(desired *Ruleset, observed *Observed) []string {
	var out []string
	want := expectedByTable(desired)
	tables := planTables(desired, observed)
	for _, table := range tables {
		exp := want[table]
		obs := &ObservedTable{Rules: map[string][]string{}}
		if observed != nil && observed.Tables[table] != nil {
			obs = observed.Tables[table]
		}
		chains := map[string]bool{}
		for c := range exp.rules {
			chains[c] = true
		}
		for _, c := range obs.Chains {
			chains[c] = true
		}
		for _, chain := range sortedKeys(chains) {
			have := obs.Rules[chain]
			if !Owned(chain) {
				have = oursIn(have)
			} else if !slices.Contains(obs.Chains, chain) && exp.chains[chain] {
				out = append(out, fmt.Sprintf("%s %s: chain missing", table, chain))
				continue
			} else if !exp.chains[chain] {
				out = append(out, fmt.Sprintf("%s %s: unexpected chain", table, chain))
				continue
			}
			out = append(out, diffRules(table, chain, exp.rules[chain], have)...)
		}
	}
	return out
}

type expectedTable struct {
	chains map[string]bool
	rules  map[string][]string
}

func expectedByTable(rs *Ruleset) map[string]expectedTable {
	out := map[string]expectedTable{}
	get := func(t string) expectedTable {
		e, ok := out[t]
		if !ok {
			e = expectedTable{chains: map[string]bool{}, rules: map[string][]string{}}
			out[t] = e
		}
		return e
	}
	if rs == nil {
		return out
	}
	for _, c := range rs.Chains {
		e := get(c.Table)
		e.chains[c.Name] = true
		if _, ok := e.rules[c.Name]; !ok {
			e.rules[c.Name] = nil
		}
	}
	for _, r := range rs.Rules {
		e := get(r.Table)
		e.rules[r.Chain] = append(e.rules[r.Chain], r.Args())
	}
	return out
}

func oursIn(rules []string) []string {
	var out []string
	for _, r := range rules {
		if ours(r) {
			out = append(out, r)
		}
	}
	return out
}

func diffRules(table, chain string, want, have []string) []string {
	if slices.Equal(want, have) {
		return nil
	}
	var out []string
	for i := 0; i < max(len(want), len(have)); i++ {
		switch {
		case i >= len(have):
			out = append(out, fmt.Sprintf("%s %s: missing rule %d: %s", table, chain, i+1, want[i]))
		case i >= len(want):
			out = append(out, fmt.Sprintf("%s %s: unexpected rule %d: %s", table, chain, i+1, have[i]))
		case want[i] != have[i]:
			out = append(out, fmt.Sprintf("%s %s: rule %d is %q, want %q", table, chain, i+1, have[i], want[i]))
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
