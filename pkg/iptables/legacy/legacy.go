// Package legacy writes a pod's rules into a fresh network namespace's
// x_tables, the kernel side of iptables-legacy, from the calling process:
// each table as one IPT_SO_SET_REPLACE (IP6T_ for IPv6), laid out byte for
// byte as iptables-legacy-restore's libiptc lays out the same rules, so
// iptables-legacy-save, the audit and inspect read them as restore's.
// The node agent writes a legacy node's ADD so, one process fewer than
// running iptables-legacy-restore. The x_tables ABI is every release's.
//
// It takes the xtables lock iptables-legacy takes, from reading the tables
// to replacing them, so it and another writer of the same namespace (the
// plugin's restore, the audit's repairs) never fail each other's commits:
// the kernel refuses a replace of a table changed since it was read. Each
// table's replace is atomic; a family's later table refused puts the
// earlier ones back, so a family is written whole or not at all.
//
// The structures are laid out as on LP64 (amd64, arm64: the platforms the
// image ships for).
package legacy

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// ErrPartial means a later table was refused and an earlier one, already
// replaced, could not be put back: the namespace must be read to know
// what it holds.
var ErrPartial = errors.New("a table written, then not put back")

// Write adds a family's ruleset to the calling thread's network namespace,
// whose tables must hold nothing but their empty built-in chains with
// ACCEPT policies (ErrNotFresh otherwise), waiting for the xtables lock
// until lockBy. Any error but one wrapping ErrPartial means nothing was
// written; ErrPartial, that the namespace must be read to know.
func Write(rs *iptables.Ruleset, lockBy time.Time) error {
	a := abiOf(rs.Family)
	unlock, err := lock(lockBy)
	if err != nil {
		return fmt.Errorf("%s: %w", rs.Family, err)
	}
	defer unlock()
	if !time.Now().Before(lockBy) {
		// Taken at the last moment: past it, the caller has stopped
		// waiting and must find nothing written.
		return fmt.Errorf("%s: %w: taken after the wait", rs.Family, ErrLocked)
	}
	s, err := open(a)
	if err != nil {
		return fmt.Errorf("%s: %w", rs.Family, err)
	}
	defer s.close()
	type planned struct {
		table string
		was   *kernelTable
		l     *layout
	}
	var plan []planned
	for _, table := range rs.Tables() {
		was, err := s.get(table)
		if err != nil {
			return fmt.Errorf("%s: %w", rs.Family, err)
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
				err = errors.Join(err, fmt.Errorf("putting the %s table back: %w: %w", done.table, ErrPartial, undo))
			}
		}
		return err
	}
	return nil
}
