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

// WriteNative in a namespace where another writer commits without pause
// (a chain of its own table made and deleted, each a new generation):
// every write succeeds and leaves exactly its ruleset, the ones another
// commit overtook read and sent again, or, overtaken every time, sent
// unbound.
func TestWriteNativeInABusyNamespace(t *testing.T) {
	n := iptablestest.NewNS(t)
	var churn *conn
	if err := n.Do(func(ns.NetNS) (err error) { churn, err = dial(); return err }); err != nil {
		t.Fatal(err)
	}
	defer churn.close()
	chain := func(typ, flags uint16) nativeBatch {
		var b nativeBatch
		b.add(typ, flags, func() string { return "chain inet churn c" }, func(a *attrs) {
			a.str(unix.NFTA_CHAIN_TABLE, "churn")
			a.str(unix.NFTA_CHAIN_NAME, "c")
		})
		return b
	}
	var table nativeBatch
	table.add(unix.NFT_MSG_NEWTABLE, unix.NLM_F_CREATE, func() string { return "table inet churn" }, func(a *attrs) { a.str(unix.NFTA_TABLE_NAME, "churn") })
	if err := churn.transact(table.msgs, table.ops); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	var commits atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			b := chain(unix.NFT_MSG_NEWCHAIN, unix.NLM_F_CREATE)
			if i%2 == 1 {
				b = chain(unix.NFT_MSG_DELCHAIN, 0)
			}
			if err := churn.transact(b.msgs, b.ops); err != nil {
				done <- err
				return
			}
			commits.Add(1)
		}
	}()
	rs := []nftables.Ruleset{nftables.Build(iptables.DefaultSpec(), false), defaultNativeSpec()}
	var last *nftables.Ruleset
	writes, overtaken := 0, 0
	err := n.Do(func(ns.NetNS) error {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.close()
		// Until ten writes had another commit between their read and
		// their own (the generation moved by more than theirs), at most
		// 400.
		for ; overtaken < 10 && writes < 400; writes++ {
			last = &rs[writes%2]
			before, err := c.generation()
			if err != nil {
				return err
			}
			if err := WriteNative(last); err != nil {
				return fmt.Errorf("write %d, %d commits of the other writer in: %w", writes, commits.Load(), err)
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
	close(stop)
	if cerr := <-done; cerr != nil {
		t.Fatalf("the other writer: %v", cerr)
	}
	if err != nil {
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
	t.Logf("%d writes, %d of them overlapping another commit; the other writer's commits: %d", writes, overtaken, commits.Load())
}

// defaultNativeSpec is a ruleset with all three of our tables.
func defaultNativeSpec() nftables.Ruleset {
	s := iptables.DefaultSpec()
	s.DNSCapture, s.TProxy, s.InvalidDrop = true, true, true
	return nftables.Build(s, true)
}
