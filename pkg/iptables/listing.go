package iptables

import "slices"

// Listing is a ruleset as "table -A CHAIN spec" lines, tables in plan
// order: what inspect prints as the rules a pod should have.
func (rs *Ruleset) Listing() []string {
	var out []string
	for _, table := range planTables(rs, nil) {
		for _, r := range rs.Rules {
			if r.Table == table {
				out = append(out, table+" -A "+r.Chain+" "+r.Spec())
			}
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
		for _, chain := range t.Chains {
			for _, spec := range t.Rules[chain] {
				if owned(chain) || ours(spec) {
					out = append(out, table+" -A "+chain+" "+spec)
				}
			}
		}
	}
	return out
}
