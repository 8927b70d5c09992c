// Package legacy writes a pod's rules into a fresh network namespace's
// x_tables, the kernel side of iptables-legacy, from the calling process:
// each table as one IPT_SO_SET_REPLACE (IP6T_ for IPv6), laid out byte for
// byte as iptables-legacy-restore's libiptc lays out the same rules, so
// iptables-legacy-save, the audit and inspect read them as restore's.
// The node agent writes a legacy node's ADD so, one process fewer than
// running iptables-legacy-restore. The x_tables ABI is every release's.
//
// Each table's replace is atomic, and the kernel refuses it (EAGAIN) if the
// table changed since it was read; a family's later table refused puts the
// earlier ones back, so a family is written whole or not at all.
package legacy

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// ErrPartial means a later table was refused and an earlier one, already
// replaced, could not be put back: the namespace must be read to know
// what it holds.
var ErrPartial = errors.New("a table written, then not put back")

// Write adds a family's ruleset to the calling thread's network namespace,
// whose tables must hold nothing but their empty built-in chains with
// ACCEPT policies (ErrNotFresh otherwise). An error wrapping
// ErrUnsupported or ErrNotFresh means nothing was written; ErrPartial,
// that the namespace must be read.
func Write(rs *iptables.Ruleset) error {
	a := abiOf(rs.Family)
	s, err := open(a)
	if err != nil {
		return err
	}
	defer s.close()
	type planned struct {
		table string
		was   *kernelTable
		l     *layout
	}
	var plan []planned
	for _, table := range tablesOf(rs) {
		was, err := s.get(table)
		if err != nil {
			return err
		}
		hooks, err := was.fresh(a)
		if err != nil {
			return fmt.Errorf("%s %s table: %w", rs.Family, table, err)
		}
		l, err := compile(a, table, hooks, rs)
		if err != nil {
			return fmt.Errorf("%s %s table: %w", rs.Family, table, err)
		}
		plan = append(plan, planned{table, was, l})
	}
	for i, p := range plan {
		err := s.replace(p.table, p.was, p.l)
		if err == nil {
			continue
		}
		err = fmt.Errorf("%s %s table: %w", rs.Family, p.table, err)
		for _, done := range slices.Backward(plan[:i]) {
			if undo := s.putBack(done.table, done.was, done.l.num); undo != nil {
				return errors.Join(err, fmt.Errorf("putting the %s table back: %w: %w", done.table, ErrPartial, undo))
			}
		}
		return err
	}
	return nil
}

// tablesOf lists the ruleset's tables sorted, as Plan orders them.
func tablesOf(rs *iptables.Ruleset) []string {
	set := map[string]bool{}
	for _, c := range rs.Chains {
		set[c.Table] = true
	}
	for _, r := range rs.Rules {
		set[r.Table] = true
	}
	return slices.Sorted(maps.Keys(set))
}
