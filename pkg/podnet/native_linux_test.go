package podnet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// nativeHeld is how our tables in the namespace differ from rs.
func nativeHeld(t *testing.T, n ns.NetNS, rs nftables.Ruleset) []string {
	t.Helper()
	var d []string
	if err := n.Do(func(ns.NetNS) (err error) { d, err = nfnl.DiffNative(&rs); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestNativeProgramCheckCleanup: a native Network writes the model's
// native ruleset (TPROXY's routes and ::6 with it), CHECK finds it whole
// and then a table gone, and Cleanup removes tables and routes.
func TestNativeProgramCheckCleanup(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	net := &Network{Native: true}
	spec := iptables.DefaultSpec()
	spec.TProxy, spec.DNSCapture = true, true
	m := iptables.Build(spec, true, true)
	n := newNS(t)
	if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
		t.Fatal(err)
	}
	if d := nativeHeld(t, n, nftables.Of(m)); len(d) > 0 {
		t.Fatalf("after Program: %v", d)
	}
	if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
		t.Fatalf("CHECK after Program: %v, %v", d, err)
	}
	if err := n.Do(func(ns.NetNS) error { return nfnl.WriteNative(&nftables.Ruleset{}) }); err != nil {
		t.Fatal(err)
	}
	if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) == 0 {
		t.Fatalf("CHECK with our tables gone: %v, %v; want differences", d, err)
	}
	if err := net.Cleanup(ctx, n.Path()); err != nil {
		t.Fatal(err)
	}
	if d, err := net.Check(ctx, n.Path(), iptables.Model{}); err != nil || len(d) > 0 {
		t.Errorf("after Cleanup: %v, %v; want nothing of ours", d, err)
	}
	var routes bool
	if err := n.Do(func(ns.NetNS) (err error) {
		for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			ok, err := hasPolicyRule(f, &iptables.PolicyRoute{Mark: spec.TProxyMark, Table: spec.TProxyTable})
			if err != nil {
				return err
			}
			routes = routes || ok
		}
		return nil
	}); err != nil || routes {
		t.Errorf("after Cleanup, policy rules left: %v, %v", routes, err)
	}
}

// TestTrustedNativeProgram: a trusted write (Trusted, Only: the agent's
// audit reads back instead) is whole without its read-back: the model's
// tables, TPROXY's routes and ::6, as CHECK reads them. That it skips the
// read-back shows only in time (BENCHMARKS.md), not here.
func TestTrustedNativeProgram(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	net := &Network{Native: true}
	tproxy := iptables.DefaultSpec()
	tproxy.TProxy = true
	for _, m := range []iptables.Model{iptables.Build(iptables.DefaultSpec(), true, false), iptables.Build(tproxy, true, true)} {
		n := newNS(t)
		written, err := net.Program(ctx, n.Path(), m, xtables.Write{Only: true, Trusted: true, Deadline: time.Now().Add(time.Minute)})
		if err != nil || !written[iptables.IPv4].Netlink {
			t.Fatalf("trusted Program: %v, %v", written, err)
		}
		if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
			t.Errorf("CHECK after a trusted Program: %v, %v", d, err)
		}
	}
}

// TestNativeWriteHonoursTheDeadline: past the caller's deadline (the
// agent's shim stopped waiting) nothing is written.
func TestNativeWriteHonoursTheDeadline(t *testing.T) {
	requireRoot(t)
	n := newNS(t)
	m := iptables.Build(iptables.DefaultSpec(), true, false)
	_, err := (&Network{Native: true}).Program(context.Background(), n.Path(), m, xtables.Write{Only: true, Deadline: time.Now().Add(-time.Second)})
	if !errors.Is(err, xtables.ErrLate) {
		t.Fatalf("Program past the deadline: %v, want ErrLate", err)
	}
	if d := nativeHeld(t, n, nftables.Ruleset{}); len(d) > 0 {
		t.Errorf("written past the deadline: %v", d)
	}
}

// TestClearRulesKeepsTheOtherKindsRedirect: a dual-stack TPROXY pod's
// rules written both as iptables and as native nftables; ClearRules of
// either kind leaves the other's redirect whole, TPROXY's policy routes
// and ::6 with it (they are the model's, whichever kind holds it), and
// none of its own rules.
func TestClearRulesKeepsTheOtherKindsRedirect(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	spec := iptables.DefaultSpec()
	spec.TProxy = true
	m := iptables.Build(spec, true, true)
	ipt := For(applied.Writer{Backend: release.NFT, Guessed: true}, xtables.Programmer{Runner: xtables.ExecRunner{}})
	native := For(applied.Writer{Backend: release.NFT, Native: true}, xtables.Programmer{Runner: xtables.ExecRunner{}})
	for _, tc := range []struct {
		name          string
		cleared, kept *Network
	}{
		{"iptables cleared", ipt, native},
		{"native cleared", native, ipt},
	} {
		n := newNS(t)
		for _, w := range []*Network{ipt, native} {
			if err := w.Reconcile(ctx, n.Path(), m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tc.cleared.ClearRules(ctx, n.Path()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d, err := tc.kept.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
			t.Errorf("%s: the other kind's redirect afterwards: %v, %v", tc.name, d, err)
		}
		// What the cleared kind holds of the model: none of its rules.
		d, err := tc.cleared.Check(ctx, n.Path(), m)
		if err != nil || len(d) == 0 {
			t.Fatalf("%s: the cleared kind still holds the model: %v, %v", tc.name, d, err)
		}
		for _, diff := range d {
			if strings.Contains(diff, "policy") || strings.Contains(diff, "lacks ::6") || !strings.Contains(diff, "missing") {
				t.Errorf("%s: the cleared kind's difference %q: want only its rules missing", tc.name, diff)
			}
		}
	}
}
