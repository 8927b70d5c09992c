package nfnl

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// A transaction bound to a generation that another commit overtook is
// refused whole, with ERESTART, and changes nothing: what lets
// replaceNative delete only the tables it read.
func TestTransactionAtAnOvertakenGeneration(t *testing.T) {
	n := iptablestest.NewNS(t)
	rs := nftables.Build(iptables.DefaultSpec(), false)
	tables, err := planNative(&rs)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Do(func(ns.NetNS) error {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.close()
		gen, held, err := c.ourTables()
		if err != nil {
			return err
		}
		if len(held) > 0 {
			return fmt.Errorf("a fresh namespace holds %v", held)
		}
		// Another writer commits first.
		var other nativeBatch
		other.add(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, func() string { return "table inet other" }, func(a *attrs) { a.str(unix.NFTA_TABLE_NAME, "other") })
		if err := c.transact(other.msgs, other.ops); err != nil {
			return err
		}
		var b nativeBatch
		b.writeTable(tables[nftables.TableNat])
		if err := c.transactAt(gen, b.msgs, b.ops); !errors.Is(err, unix.ERESTART) {
			t.Errorf("a transaction at the overtaken generation: %v, want ERESTART", err)
		}
		if _, held, err = c.ourTables(); err != nil || len(held) > 0 {
			t.Errorf("after the refused transaction the namespace holds %v (%v), want none of ours", held, err)
		}
		gen, _, err = c.ourTables()
		if err != nil {
			return err
		}
		if err := c.transactAt(gen, b.msgs, b.ops); err != nil {
			t.Errorf("a transaction at the current generation: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// otherWriter commits steps in turn in n, from a socket of its own,
// until stopped, a step whose table our write deleted first (ENOENT)
// counting as done; stop runs last, then returns the commits and the
// first other error.
func otherWriter(t *testing.T, n ns.NetNS, steps []nativeBatch, last *nativeBatch) (stop func() (int64, error)) {
	t.Helper()
	var c *conn
	if err := n.Do(func(ns.NetNS) (err error) { c, err = dial(); return err }); err != nil {
		t.Fatal(err)
	}
	commit := func(b nativeBatch) error {
		if err := c.transact(b.msgs, b.ops); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	}
	quit, done := make(chan struct{}), make(chan error, 1)
	var commits atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			if err := commit(steps[i%len(steps)]); err != nil {
				done <- err
				return
			}
			commits.Add(1)
		}
	}()
	return func() (int64, error) {
		close(quit)
		err := <-done
		if err == nil && last != nil {
			err = commit(*last)
		}
		c.close()
		return commits.Load(), err
	}
}

// WriteNative in a namespace where two other writers commit without
// pause, each commit a new generation: one makes and deletes a chain of
// its own table, the other makes and deletes istio-proxy-raw, one of ours
// that neither ruleset written has (a write that read it present must
// delete it, and one that read it absent must not leave it). Every write
// succeeds, the ones another commit overtook read and sent again, or,
// overtaken every time, sent unbound; the last leaves exactly its
// ruleset once the others stop (raw deleted).
func TestWriteNativeInABusyNamespace(t *testing.T) {
	n := iptablestest.NewNS(t)
	batch := func(typ, flags uint16, op string, fill func(*attrs)) nativeBatch {
		var b nativeBatch
		b.add(typ, flags, func() string { return op }, fill)
		return b
	}
	table := func(name string) func(*attrs) { return func(a *attrs) { a.str(unix.NFTA_TABLE_NAME, name) } }
	chain := func(a *attrs) {
		a.str(unix.NFTA_CHAIN_TABLE, "churn")
		a.str(unix.NFTA_CHAIN_NAME, "c")
	}
	churn := otherWriter(t, n, []nativeBatch{
		batch(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, "table inet churn", table("churn")),
		batch(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE, "chain inet churn c", chain),
		batch(unix.NFT_MSG_DELCHAIN, 0, "chain inet churn c", chain),
	}, nil)
	delRaw := batch(unix.NFT_MSG_DELTABLE, 0, "deleting table inet "+nftables.TableRaw, table(nftables.TableRaw))
	raw := otherWriter(t, n, []nativeBatch{
		batch(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, "table inet "+nftables.TableRaw, table(nftables.TableRaw)),
		delRaw,
	}, &delRaw)
	tproxy := iptables.DefaultSpec()
	tproxy.TProxy = true
	rs := []nftables.Ruleset{nftables.Build(iptables.DefaultSpec(), false), nftables.Build(tproxy, false)}
	var last *nftables.Ruleset
	writes, overtaken := 0, 0
	err := n.Do(func(ns.NetNS) error {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.close()
		// At least 100 writes, and until ten had another commit between
		// their read and their own (the generation moved by more than
		// theirs); at most 400.
		for ; (overtaken < 10 || writes < 100) && writes < 400; writes++ {
			last = &rs[writes%2]
			before, err := c.generation()
			if err != nil {
				return err
			}
			if err := WriteNative(last); err != nil {
				return fmt.Errorf("write %d: %w", writes, err)
			}
			after, err := c.generation()
			if err != nil {
				return err
			}
			if after-before > 1 {
				overtaken++
			}
		}
		return nil
	})
	churned, churnErr := churn()
	raws, rawErr := raw()
	if err := errors.Join(err, churnErr, rawErr); err != nil {
		t.Fatal(err)
	}
	if overtaken < 10 {
		t.Fatalf("only %d of %d writes overlapped another commit: nothing was tested", overtaken, writes)
	}
	if err := n.Do(func(ns.NetNS) error {
		d, err := DiffNative(last)
		if err == nil && len(d) > 0 {
			err = fmt.Errorf("after the writes: %v", d)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	t.Logf("%d writes, %d of them overlapping another commit; the other writers' commits: %d, %d", writes, overtaken, churned, raws)
}
