package iptables

import (
	"fmt"
	"slices"
	"strings"
)

// Plan renders the iptables-restore --noflush input that takes one family
// from what was observed to what is desired, touching nothing that is not
// ours. A nil desired ruleset renders the cleanup; a nil observed state means
// a fresh namespace. Per table, in one transaction:
//
//	:CHAIN - [0:0]  each desired chain: created, or flushed if it exists
//	-D CHAIN n      each observed rule of ours (see ours) in a chain that
//	                is not ours, highest number first so the others keep
//	                their numbers
//	-F / -X CHAIN   our observed chains that are no longer desired
//	-A ...          the desired rules
func Plan(desired *Ruleset, observed *Observed) ([]byte, error) {
	var b strings.Builder
	for _, table := range planTables(desired, observed) {
		var lines []string
		keep := map[string]bool{}
		if desired != nil {
			for _, c := range desired.Chains {
				if c.Table == table {
					keep[c.Name] = true
					lines = append(lines, fmt.Sprintf(":%s - [0:0]", c.Name))
				}
			}
		}
		if observed != nil && observed.Tables[table] != nil {
			lines = append(lines, removals(observed.Tables[table], keep)...)
		}
		if desired != nil {
			for _, r := range desired.Rules {
				if r.Table == table {
					lines = append(lines, fmt.Sprintf("-A %s %s", r.Chain, r.Args()))
				}
			}
		}
		if len(lines) == 0 {
			continue
		}
		b.WriteString("*" + table + "\n")
		for _, l := range lines {
			if err := checkTokens(l); err != nil {
				return nil, err
			}
			b.WriteString(l + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String()), nil
}

// removals deletes our observed rules in other chains and the owned chains
// not in keep.
func removals(t *ObservedTable, keep map[string]bool) []string {
	var dels, flush, drop []string
	for _, chain := range t.Chains {
		if Owned(chain) {
			if !keep[chain] {
				flush = append(flush, "-F "+chain)
				drop = append(drop, "-X "+chain)
			}
			continue
		}
		rules := t.Rules[chain]
		for i := len(rules) - 1; i >= 0; i-- {
			if ours(rules[i]) {
				dels = append(dels, fmt.Sprintf("-D %s %d", chain, i+1))
			}
		}
	}
	return slices.Concat(dels, flush, drop)
}

// Tables lists, sorted, the tables the ruleset uses: the order Plan
// writes them in, and the kernel writers too.
func (rs *Ruleset) Tables() []string { return planTables(rs, nil) }

// planTables lists, sorted, the tables that hold desired rules or observed
// state of ours.
func planTables(desired *Ruleset, observed *Observed) []string {
	set := map[string]bool{}
	if desired != nil {
		for _, c := range desired.Chains {
			set[c.Table] = true
		}
		for _, r := range desired.Rules {
			set[r.Table] = true
		}
	}
	if observed != nil {
		for name, t := range observed.Tables {
			if hasOurs(t) {
				set[name] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func hasOurs(t *ObservedTable) bool {
	if len(t.OwnedChains()) > 0 {
		return true
	}
	for chain, rules := range t.Rules {
		for _, r := range rules {
			if !Owned(chain) && ours(r) {
				return true
			}
		}
	}
	return false
}
