package nfnl

import (
	"errors"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// A transaction bound to a generation that another commit overtook is
// refused whole, with ERESTART, and changes nothing: what lets
// replaceNative delete only the tables it read.
func TestTransactionAtAnOvertakenGeneration(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
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
			t.Fatalf("a fresh namespace holds %v", held)
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
