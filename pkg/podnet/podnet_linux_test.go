package podnet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	goipt "github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// These tests program real network namespaces with both iptables backends.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
}

// machineLayout is the layout the machine's iptables-nft writes in, if
// nfnl lays rules out as its release does.
func machineLayout() (nfnl.Layout, string, bool) {
	v, err := xtables.NFTVersion("iptables-nft-restore")
	if err != nil {
		return nfnl.Layout{}, err.Error(), false
	}
	l, ok := nfnl.LayoutOf(v)
	return l, "iptables-nft " + v, ok
}

// fakeLayout is a layout for transactions no kernel sees.
func fakeLayout() nfnl.Layout {
	l, _ := nfnl.LayoutOf("1.8.9")
	return l
}

func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	loUp(t, n)
	return n
}

// loUp brings lo up, as a runtime does before the chain runs (IPv6 local
// routes need it up).
func loUp(t *testing.T, n ns.NetNS) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
}

var backends = []release.Backend{release.Legacy, release.NFT}

func forEachBackend(t *testing.T, f func(t *testing.T, b release.Backend)) {
	requireRoot(t)
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) { f(t, b) })
	}
}

func netnsFor(b release.Backend, r xtables.Runner) *Network {
	if r == nil {
		r = xtables.ExecRunner{}
	}
	return &Network{Programmer: &xtables.Programmer{Runner: r, Backend: b}}
}

// ipt is go-iptables in the namespace: an independent reader of the rules.
func ipt(t *testing.T, n ns.NetNS, b release.Backend, fam iptables.Family, f func(*goipt.IPTables)) {
	t.Helper()
	proto, name := goipt.ProtocolIPv4, "iptables-"+string(b)
	if fam == iptables.IPv6 {
		proto, name = goipt.ProtocolIPv6, "ip6tables-"+string(b)
	}
	path, err := release.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Do(func(ns.NetNS) error {
		i, err := goipt.New(goipt.IPFamily(proto), goipt.Path(path))
		if err != nil {
			return err
		}
		f(i)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestProgramDefaultBothFamilies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		m := iptables.Build(iptables.DefaultSpec(), true, true)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			ipt(t, n, b, fam, func(i *goipt.IPTables) {
				chains, err := i.ListChains("nat")
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range []string{iptables.ChainInbound, iptables.ChainInRedirect, iptables.ChainOutput, iptables.ChainRedirect} {
					if !slices.Contains(chains, c) {
						t.Errorf("%s: chain %s missing, have %v", fam, c, chains)
					}
				}
				ok, err := i.Exists("nat", iptables.ChainRedirect, "-p", "tcp", "-j", "REDIRECT", "--to-ports", "15001")
				if err != nil || !ok {
					t.Errorf("%s: outbound REDIRECT to 15001 missing (%v)", fam, err)
				}
			})
		}
		diffs, err := net.Check(ctx, n.Path(), m)
		if err != nil || len(diffs) != 0 {
			t.Errorf("Check after Program: %v %v", diffs, err)
		}
	})
}

func TestProgramTwiceSameRules(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		m := iptables.Build(iptables.DefaultSpec(), true, false)
		for i := 0; i < 2; i++ {
			if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
				t.Fatalf("Program #%d: %v", i+1, err)
			}
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			for _, chain := range []string{iptables.Prerouting, iptables.Output} {
				rules, err := i.List("nat", chain)
				if err != nil {
					t.Fatal(err)
				}
				jumps := 0
				for _, r := range rules {
					if strings.Contains(r, "-j ISTIO_") {
						jumps++
					}
				}
				if jumps != 1 {
					t.Errorf("%s has %d jumps into our chains after two ADDs, want 1: %v", chain, jumps, rules)
				}
			}
		})
	})
}

func TestProgramReplacesOtherSpec(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		if _, err := net.Program(ctx, n.Path(), iptables.Build(iptables.DefaultSpec(), true, false), xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		spec := iptables.DefaultSpec()
		spec.InboundPorts = iptables.Ports{}
		spec.OutboundIPs = iptables.Prefixes{List: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
		m := iptables.Build(spec, true, false)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
			t.Errorf("after re-programming: %v %v", diffs, err)
		}
	})
}

// Interface RETURNs are ours by their tag, not by a jump: re-programming
// with other interfaces replaces them, CHECK sees one go missing, and
// cleanup removes them, while an untagged rule of the same shape stays.
func TestInterfaceRulesAreOurs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		if err := n.Do(func(ns.NetNS) error {
			restore, _ := release.LookPath(xtables.CommandsFor(b, iptables.IPv4).Restore)
			_, err := xtables.ExecRunner{}.Run(ctx, []byte("*nat\n-A PREROUTING -i net9 -j RETURN\nCOMMIT\n"), restore, "-w", "--noflush")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		spec := iptables.DefaultSpec()
		spec.ExcludeInterfaces = iptablestest.IfNames("net1")
		if _, err := net.Program(ctx, n.Path(), iptables.Build(spec, true, false), xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		spec.ExcludeInterfaces = iptablestest.IfNames("net2")
		spec.RerouteInterfaces = iptablestest.IfNames("kv0")
		m := iptables.Build(spec, true, false)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			if ok, err := i.Exists("nat", iptables.Prerouting, "-i", "net1", "-m", "comment", "--comment", iptables.RuleTag, "-j", "RETURN"); err != nil || ok {
				t.Errorf("the old interface's RETURN survived re-programming (%v)", err)
			}
			if err := i.Delete("nat", iptables.Output, "-o", "net2", "-m", "comment", "--comment", iptables.RuleTag, "-j", "RETURN"); err != nil {
				t.Fatal(err)
			}
		})
		if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) == 0 {
			t.Errorf("CHECK after deleting an interface rule: %v %v, want a difference", diffs, err)
		}
		if err := net.Cleanup(ctx, n.Path()); err != nil {
			t.Fatal(err)
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			for _, chain := range []string{iptables.Prerouting, iptables.Output} {
				rules, err := i.List("nat", chain)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rules {
					if strings.Contains(r, iptables.RuleTag) || strings.Contains(r, iptables.ChainPrefix) {
						t.Errorf("left after Cleanup: %s", r)
					}
				}
			}
			if ok, err := i.Exists("nat", iptables.Prerouting, "-i", "net9", "-j", "RETURN"); err != nil || !ok {
				t.Errorf("an untagged foreign RETURN was removed (%v)", err)
			}
		})
	})
}

// foreign adds rules that are not ours: they must survive everything we do.
const foreign = "*nat\n:FOREIGN - [0:0]\n-A PREROUTING -p udp -j FOREIGN\n-A OUTPUT -p udp -j FOREIGN\n-A FOREIGN -j RETURN\nCOMMIT\n"

func TestCleanupKeepsForeignRules(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		r := xtables.ExecRunner{}
		restore, _ := release.LookPath(xtables.CommandsFor(b, iptables.IPv4).Restore)
		if err := n.Do(func(ns.NetNS) error {
			_, err := r.Run(ctx, []byte(foreign), restore, "-w", "--noflush")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		net := netnsFor(b, nil)
		if _, err := net.Program(ctx, n.Path(), iptables.Build(iptables.DefaultSpec(), true, true), xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		if err := net.Cleanup(ctx, n.Path()); err != nil {
			t.Fatal(err)
		}
		if err := net.Cleanup(ctx, n.Path()); err != nil {
			t.Fatalf("second Cleanup: %v", err)
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			chains, _ := i.ListChains("nat")
			for _, c := range chains {
				if strings.HasPrefix(c, iptables.ChainPrefix) {
					t.Errorf("chain %s left after Cleanup", c)
				}
			}
			for _, chain := range []string{iptables.Prerouting, iptables.Output} {
				if ok, _ := i.Exists("nat", chain, "-p", "udp", "-j", "FOREIGN"); !ok {
					t.Errorf("foreign rule in %s removed", chain)
				}
			}
		})
	})
}

func TestCheckDetectsTampering(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		m := iptables.Build(iptables.DefaultSpec(), true, false)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
				t.Fatal(err)
			}
		})
		diffs, err := net.Check(ctx, n.Path(), m)
		if err != nil {
			t.Fatal(err)
		}
		if len(diffs) != 1 || !strings.Contains(diffs[0], "missing rule") {
			t.Errorf("Check after deleting the catch-all: %v", diffs)
		}
	})
}

// countingRunner runs every command for real and counts the saves and
// the restores.
type countingRunner struct {
	xtables.ExecRunner
	saves, restores atomic.Int32
}

func (c *countingRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	switch {
	case strings.HasSuffix(name, "-save"):
		c.saves.Add(1)
	case strings.HasSuffix(name, "-restore"):
		c.restores.Add(1)
	}
	return c.ExecRunner.Run(ctx, stdin, name, args...)
}

// With Confirmed, a check runs iptables-save only for a state it has not
// seen printed as the model: the second pod in the first pod's state is
// read over netlink, however its rules were written, and a tampered one is
// read with iptables-save and its difference found.
// On legacy, the state is one holding exactly the model, as written by
// iptables-legacy-restore or by x_tables replaces.
func TestCheckOfAConfirmedState(t *testing.T) {
	requireRoot(t)
	for _, b := range []release.Backend{release.NFT, release.Legacy} {
		t.Run(string(b), func(t *testing.T) { checkOfAConfirmedState(t, b) })
	}
}

func checkOfAConfirmedState(t *testing.T, b release.Backend) {
	ctx, m := context.Background(), iptables.Build(iptables.DefaultSpec(), true, true)
	run := &countingRunner{}
	net := &Network{Programmer: &xtables.Programmer{Runner: run, Backend: b,
		Confirmed: xtables.NewConfirmed(nfnl.ReadFingerprint, legacy.Holds)}}
	check := func(n ns.NetNS) ([]string, int32) {
		t.Helper()
		run.saves.Store(0)
		d, err := net.Check(ctx, n.Path(), m)
		if err != nil {
			t.Fatal(err)
		}
		return d, run.saves.Load()
	}
	first, second := newNS(t), newNS(t)
	for _, n := range []ns.NetNS{first, second} {
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
	}
	if d, saves := check(first); len(d) > 0 || saves != 2 {
		t.Fatalf("first pod: %v after %d saves, want no difference after one a family", d, saves)
	}
	if d, saves := check(second); len(d) > 0 || saves != 0 {
		t.Errorf("second pod: %v after %d saves, want no difference after none", d, saves)
	}
	// The writer's own first write: x_tables replaces on legacy, netlink
	// on nf_tables (where the machine's release has a layout).
	own, by, ownWrite := xtables.Write{Legacy: map[iptables.Family]bool{iptables.IPv4: true, iptables.IPv6: true}}, "as x_tables replaces", true
	wrote := func(w xtables.Written) bool { return w.Replaced }
	if b == release.NFT {
		layout, _, ok := machineLayout()
		own, by, ownWrite = xtables.Write{Netlink: map[iptables.Family]nfnl.Layout{iptables.IPv4: layout, iptables.IPv6: layout}}, "over netlink", ok
		wrote = func(w xtables.Written) bool { return w.Netlink }
	}
	if ownWrite {
		n := newNS(t)
		written, err := netnsFor(b, nil).Program(ctx, n.Path(), m, own)
		if err != nil {
			t.Fatal(err)
		}
		for f, w := range written {
			if !wrote(w) {
				t.Errorf("%s written %+v, want %s", f, w, by)
			}
		}
		if d, saves := check(n); len(d) > 0 || saves != 0 {
			t.Errorf("a pod written %s: %v after %d saves, want no difference after none", by, d, saves)
		}
	}
	ipt(t, second, b, iptables.IPv4, func(i *goipt.IPTables) {
		if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
			t.Fatal(err)
		}
	})
	// IPv4 is read with iptables-save; IPv6 is still in a confirmed state.
	if d, saves := check(second); len(d) != 1 || !strings.Contains(d[0], "missing rule") || saves != 1 {
		t.Errorf("tampered pod: %v after %d saves, want its missing rule after one", d, saves)
	}
}

// hidingSaves runs every command for real, but hides one rule of ours
// from each iptables-save: it deletes the rule just before and puts it back
// just after (with the backend's iptables), as a writer racing the audit
// could.
type hidingSaves struct {
	xtables.ExecRunner
	b release.Backend
}

func (h hidingSaves) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	if !strings.HasSuffix(name, "-save") {
		return h.ExecRunner.Run(ctx, stdin, name, args...)
	}
	if _, err := h.ExecRunner.Run(ctx, nil, "iptables-"+string(h.b), "-w", "-t", "nat", "-D", iptables.ChainOutput, "1"); err != nil {
		return nil, err
	}
	out, err := h.ExecRunner.Run(ctx, stdin, name, args...)
	if _, err := h.ExecRunner.Run(ctx, nil, "iptables-"+string(h.b), "-w", "-t", "nat", "-I", iptables.ChainOutput, "1", "-j", "RETURN"); err != nil {
		return nil, err
	}
	return out, err
}

// A state changed and changed back while iptables-save read it is not
// confirmed, though its fingerprint is the same before and after: another
// pod in that state is read with iptables-save, and its bypass found. (On
// legacy the state, not the model's exactly, is never held.)
func TestCheckConfirmsNoStateChangedDuringTheRead(t *testing.T) {
	requireRoot(t)
	for _, b := range []release.Backend{release.NFT, release.Legacy} {
		t.Run(string(b), func(t *testing.T) { checkConfirmsNoStateChangedDuringTheRead(t, b) })
	}
}

func checkConfirmsNoStateChangedDuringTheRead(t *testing.T, b release.Backend) {
	ctx, m := context.Background(), iptables.Build(iptables.DefaultSpec(), true, false)
	confirmed := xtables.NewConfirmed(nfnl.ReadFingerprint, legacy.Holds)
	bypassed := func() ns.NetNS {
		n := newNS(t)
		if _, err := netnsFor(b, nil).Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		ipt(t, n, b, iptables.IPv4, func(i *goipt.IPTables) {
			if err := i.Insert("nat", iptables.ChainOutput, 1, "-j", "RETURN"); err != nil {
				t.Fatal(err)
			}
		})
		return n
	}
	racing := &Network{Programmer: &xtables.Programmer{Runner: hidingSaves{b: b}, Backend: b, Confirmed: confirmed}}
	if d, err := racing.Check(ctx, bypassed().Path(), m); err != nil || len(d) > 0 {
		t.Fatalf("the racing check: %v %v; want no difference (the rule was hidden)", d, err)
	}
	run := &countingRunner{}
	checker := &Network{Programmer: &xtables.Programmer{Runner: run, Backend: b, Confirmed: confirmed}}
	d, err := checker.Check(ctx, bypassed().Path(), m)
	if err != nil || len(d) == 0 || !strings.Contains(d[0], `rule 1 is "-j RETURN"`) || run.saves.Load() != 1 {
		t.Errorf("a pod in the raced state: %v %v after %d saves; want its RETURN first, read with iptables-save", d, err, run.saves.Load())
	}
}

// failingRestore runs every command for real but reports the restores of
// one program numbered in fail as failed, as if iptables-restore died after
// committing. Families are programmed concurrently, hence the lock.
type failingRestore struct {
	xtables.ExecRunner
	program string // "iptables" or "ip6tables"
	fail    map[int]bool
	mu      sync.Mutex
	seen    int
}

func (f *failingRestore) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	out, err := f.ExecRunner.Run(ctx, stdin, name, args...)
	base := filepath.Base(name)
	if strings.HasPrefix(base, f.program+"-") && strings.HasSuffix(base, "-restore") {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.seen++; f.fail[f.seen] {
			return nil, errors.New("injected restore failure")
		}
	}
	return out, err
}

func TestFailedApplyLeavesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		// Both attempts for IPv6 fail while IPv4 succeeds: both families
		// must be rolled back.
		net := netnsFor(b, &failingRestore{program: "ip6tables", fail: map[int]bool{1: true, 2: true}})
		_, err := net.Program(ctx, n.Path(), iptables.Build(iptables.DefaultSpec(), true, true), xtables.Write{})
		if err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("Program = %v, want the injected failure", err)
		}
		for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			var obs *iptables.Observed
			if err := n.Do(func(ns.NetNS) error {
				var err error
				obs, err = netnsFor(b, nil).Programmer.Read(ctx, fam)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if !obs.Empty() {
				t.Errorf("%s: rules left after a failed ADD", fam)
			}
		}
	})
}

// A panic in the namespace's work (the netlink writer, in the agent that
// runs ADDs) fails the step; the process goes on.
func TestPanicFailsTheStep(t *testing.T) {
	requireRoot(t)
	n := newNS(t)
	network := netnsFor(release.NFT, nil)
	network.Programmer.Transaction = func(*iptables.Ruleset, nfnl.Layout) error { panic("the encoder's bug") }
	w := xtables.Write{Trusted: true, Only: true, Netlink: map[iptables.Family]nfnl.Layout{iptables.IPv4: fakeLayout()}}
	_, err := network.Program(context.Background(), n.Path(), iptables.Build(iptables.DefaultSpec(), true, false), w)
	if !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), "the encoder's bug") {
		t.Errorf("Program = %v, want the panic as an error", err)
	}
}

func TestApplyRetriesOneFailedRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, &failingRestore{program: "iptables", fail: map[int]bool{1: true}})
		m := iptables.Build(iptables.DefaultSpec(), true, false)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatalf("one failed restore is reconciled by the second attempt: %v", err)
		}
		if diffs, err := netnsFor(b, nil).Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
			t.Errorf("Check: %v %v", diffs, err)
		}
	})
}

func TestIPv6PassthroughAddress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		m := iptables.Build(iptables.DefaultSpec(), true, true)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		var has bool
		if err := n.Do(func(ns.NetNS) error { var err error; has, err = hasPassthroughV6(); return err }); err != nil || !has {
			t.Fatalf("::6 on lo after an IPv6 ADD: %v %v", has, err)
		}
		if err := n.Do(func(ns.NetNS) error {
			lo, _ := netlink.LinkByName("lo")
			return netlink.AddrDel(lo, &netlink.Addr{IPNet: passthroughV6})
		}); err != nil {
			t.Fatal(err)
		}
		diffs, err := net.Check(ctx, n.Path(), m)
		if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "::6") {
			t.Errorf("Check without ::6 = %v, %v", diffs, err)
		}
	})
}

func TestMissingNetns(t *testing.T) {
	requireRoot(t)
	err := netnsFor(release.Auto, nil).Cleanup(context.Background(), "/var/run/netns/does-not-exist")
	if !errors.Is(err, ErrNoNetns) {
		t.Errorf("Cleanup of a missing netns = %v, want ErrNoNetns", err)
	}
}

// A path that is no namespace (a plain file, say: a runtime's netns
// directory after a restart; or a FIFO, which must not hold the caller in
// open) is refused before anything runs.
func TestNotANetns(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	file, fifo := filepath.Join(dir, "cni-1"), filepath.Join(dir, "cni-2")
	if err := os.WriteFile(file, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, fifo} {
		done := make(chan error, 1)
		go func() { done <- netnsFor(release.Auto, nil).Cleanup(context.Background(), path) }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrOpenNetns) || !strings.Contains(err.Error(), "not a namespace") {
				t.Errorf("Cleanup of %s = %v, want ErrOpenNetns", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Cleanup of %s is held in open", path)
		}
	}
}

// TestEverySpecReadsBack programs every example spec in a fresh namespace:
// Program compares iptables-save's output with the rendered rules, so this
// proves each rule shape prints back exactly as rendered, on both backends.
func TestEverySpecReadsBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		for name, spec := range iptablestest.Specs() {
			t.Run(name, func(t *testing.T) {
				n, ctx := newNS(t), context.Background()
				if _, err := netnsFor(b, nil).Program(ctx, n.Path(), iptables.Build(spec, true, true), xtables.Write{}); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// The netlink writer, as the plugin wires it, programs every spec: without
// Write.Trusted Apply reads each family back and finds the model, and a
// second Program into the same namespace (a repeated ADD) falls back to
// iptables-restore and still holds exactly the model.
func TestEverySpecOverNetlink(t *testing.T) {
	requireRoot(t)
	layout, which, ok := machineLayout()
	if !ok {
		t.Skipf("%s: nfnl lays out no rules as it writes them (%q)", which, release.Layouts)
	}
	for name, spec := range iptablestest.Specs() {
		t.Run(name, func(t *testing.T) {
			n, ctx := newNS(t), context.Background()
			var wrote, fellBack atomic.Int32 // the families run at once
			net := netnsFor(release.NFT, nil)
			net.Programmer.Transaction = func(rs *iptables.Ruleset, l nfnl.Layout) error {
				if l != layout {
					t.Errorf("%s laid out as iptables %q, want the machine's %s", rs.Family, l.Release(), layout.Release())
				}
				wrote.Add(1)
				return nfnl.Write(rs, l)
			}
			w := xtables.Write{Netlink: map[iptables.Family]nfnl.Layout{iptables.IPv4: layout, iptables.IPv6: layout}}
			m := iptables.Build(spec, true, true)
			first, err := net.Program(ctx, n.Path(), m, w)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
				if !first[f].Netlink || first[f].Refused != nil {
					fellBack.Add(1)
				}
			}
			if wrote.Load() != 2 || fellBack.Load() != 0 {
				t.Fatalf("%d netlink writes, %d fallbacks; want one write per family", wrote.Load(), fellBack.Load())
			}
			written, err := net.Program(ctx, n.Path(), m, w)
			if err != nil {
				t.Fatal(err)
			}
			for _, wr := range written {
				if wr.Refused != nil {
					fellBack.Add(1)
				}
			}
			if fellBack.Load() != 2 {
				t.Errorf("a repeated Program fell back %d times, want once per family", fellBack.Load())
			}
			if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
				t.Errorf("after a repeated Program: %v %v", d, err)
			}
		})
	}
}

// ipIn runs iproute2's ip in the namespace and returns its output.
func ipIn(t *testing.T, n ns.NetNS, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", filepath.Base(n.Path())}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TPROXY's policy routing comes and goes with the rules: Program adds the
// fwmark rule and the local default route in both families, CHECK misses a
// deleted rule, and Cleanup removes both.
func TestTProxyPolicyRouting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		net := netnsFor(b, nil)
		spec := iptables.DefaultSpec()
		spec.TProxy, spec.TProxyMark, spec.TProxyTable = true, 0x1000, 200
		m := iptables.Build(spec, true, true)
		if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
			t.Fatalf("CHECK after Program: %v %v", diffs, err)
		}
		ipRule := func(args ...string) string { return ipIn(t, n, args...) }
		for _, fam := range []string{"-4", "-6"} {
			if r := ipRule(fam, "rule"); !strings.Contains(r, "fwmark 0x1000 lookup 200") {
				t.Errorf("ip %s rule:\n%s", fam, r)
			}
			if r := ipRule(fam, "route", "show", "table", "200"); !strings.Contains(r, "local default dev lo") {
				t.Errorf("ip %s route table 200:\n%s", fam, r)
			}
		}
		ipRule("-6", "rule", "del", "fwmark", "0x1000", "lookup", "200")
		if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "ipv6: ip rule fwmark 0x1000 lookup 200 missing") {
			t.Errorf("CHECK after deleting the IPv6 rule: %v %v", diffs, err)
		}
		if err := net.Cleanup(ctx, n.Path()); err != nil {
			t.Fatal(err)
		}
		for _, fam := range []string{"-4", "-6"} {
			if r := ipRule(fam, "rule"); strings.Contains(r, "0x1000") {
				t.Errorf("ip %s rule after Cleanup:\n%s", fam, r)
			}
			if r := ipRule(fam, "route", "show", "table", "200"); strings.TrimSpace(r) != "" {
				t.Errorf("ip %s route table 200 after Cleanup:\n%s", fam, r)
			}
		}
	})
}

// Policy routing edge cases: lo still down at ADD; a rule that only looks
// like ours does not satisfy CHECK; Cleanup removes a rule whose route is
// gone, and leaves rules that are not plain "fwmark lookup" alone. (A
// foreign "local default dev lo" route cannot be told from ours; only
// TPROXY makes one.)
func TestTProxyPolicyRoutingEdges(t *testing.T) {
	requireRoot(t)
	n, ctx := newNS(t), context.Background()
	ip := func(args ...string) string { return ipIn(t, n, args...) }
	ip("link", "set", "lo", "down")
	net := netnsFor(release.Auto, nil)
	spec := iptables.DefaultSpec()
	spec.TProxy = true
	m := iptables.Build(spec, true, true)
	if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
		t.Fatalf("Program with lo down: %v", err)
	}
	// Swap our IPv4 rule for an inverted, masked one on another device.
	ip("-4", "rule", "del", "fwmark", "1337", "lookup", "133")
	ip("-4", "rule", "add", "not", "fwmark", "0x539/0x1", "iif", "eth9", "lookup", "133")
	if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "ipv4: ip rule") {
		t.Errorf("CHECK with a look-alike rule: %v %v", diffs, err)
	}
	// Foreign routing, and our IPv6 route gone before cleanup.
	ip("-4", "rule", "add", "fwmark", "0x1/0x1", "iif", "lo", "lookup", "100")
	ip("-4", "route", "add", "local", "default", "dev", "lo", "table", "100")
	ip("-6", "route", "del", "local", "default", "dev", "lo", "table", "133")
	if err := net.Cleanup(ctx, n.Path()); err != nil {
		t.Fatal(err)
	}
	if r := ip("-6", "rule"); strings.Contains(r, "lookup 133") {
		t.Errorf("our IPv6 rule, its route gone, survived Cleanup:\n%s", r)
	}
	if r := ip("-4", "rule"); !strings.Contains(r, "fwmark 0x1/0x1 iif lo lookup 100") || !strings.Contains(r, "not from all fwmark 0x539/0x1 iif eth9") {
		t.Errorf("foreign rules removed by Cleanup:\n%s", r)
	}
}

// HasIPv6 says what vishvananda's AddrList says of the namespace's
// addresses: a global unicast IPv6 address (ULA included, as Go counts
// it), not loopback or link-local ones, nor IPv4; an address with a peer
// by its own (local) address. The addresses are on lo, which any
// interface's would be listed as.
func TestHasIPv6Addresses(t *testing.T) {
	requireRoot(t)
	addr := func(s string) *netlink.Addr {
		a, err := netlink.ParseAddr(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	withPeer := func(local, peer string) *netlink.Addr {
		a := addr(local)
		a.Peer = addr(peer).IPNet
		return a
	}
	for name, c := range map[string]struct {
		addrs []*netlink.Addr
		want  bool
	}{
		"lo's ::1 only":             {nil, false},
		"link-local":                {[]*netlink.Addr{addr("fe80::5/64")}, false},
		"IPv4 only":                 {[]*netlink.Addr{addr("198.51.100.7/24")}, false},
		"documentation global":      {[]*netlink.Addr{addr("2001:db8::7/128")}, true},
		"unique local":              {[]*netlink.Addr{addr("fd12::3/64")}, true},
		"link-local and global":     {[]*netlink.Addr{addr("fe80::5/64"), addr("198.51.100.7/24"), addr("2001:db8::8/64")}, true},
		"global, a link-local peer": {[]*netlink.Addr{withPeer("2001:db8::10/128", "fe80::1/128")}, true},
		"link-local, no global":     {[]*netlink.Addr{withPeer("fe80::10/128", "fe80::1/128")}, false},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNS(t)
			var oracle bool
			if err := n.Do(func(ns.NetNS) error {
				lo, err := netlink.LinkByName("lo")
				if err != nil {
					return err
				}
				for _, a := range c.addrs {
					// No DAD: the address is usable, and listed, at once.
					a.Flags = syscall.IFA_F_NODAD
					if err := netlink.AddrAdd(lo, a); err != nil {
						return err
					}
				}
				addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
				for _, a := range addrs {
					oracle = oracle || a.IP.IsGlobalUnicast()
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			got, err := (&Network{}).HasIPv6(n.Path())
			if err != nil || got != c.want || got != oracle {
				t.Errorf("HasIPv6 = %v, %v; want %v (AddrList says %v)", got, err, c.want, oracle)
			}
		})
	}
}

// HasIPv6 reads the namespace the rules go into, and Program writes the
// families it found: the ADD's path when the runtime passed no addresses.
func TestHasIPv6ThenProgram(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		ctx := context.Background()
		for _, global := range []bool{false, true} {
			n := newNS(t)
			if global {
				if err := n.Do(func(ns.NetNS) error {
					lo, err := netlink.LinkByName("lo")
					if err != nil {
						return err
					}
					return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8::7"), Mask: net.CIDRMask(128, 128)}})
				}); err != nil {
					t.Fatal(err)
				}
			}
			network := netnsFor(b, nil)
			v6, err := network.HasIPv6(n.Path())
			if err != nil || v6 != global {
				t.Fatalf("HasIPv6 = %v, %v in a namespace with a global IPv6 address: %v", v6, err, global)
			}
			want := iptables.Build(iptables.DefaultSpec(), true, v6)
			if _, err := network.Program(ctx, n.Path(), want, xtables.Write{}); err != nil {
				t.Fatal(err)
			}
			if diffs, err := network.Check(ctx, n.Path(), want); err != nil || len(diffs) != 0 {
				t.Errorf("global IPv6 %v: Check = %v, %v", global, diffs, err)
			}
			if global {
				// The IPv6 family's chains are there, not only the model's word.
				ipt(t, n, b, iptables.IPv6, func(i *goipt.IPTables) {
					if ok, err := i.ChainExists("nat", iptables.ChainRedirect); err != nil || !ok {
						t.Errorf("IPv6 %s missing: %v", iptables.ChainRedirect, err)
					}
				})
			}
		}
	})
}

// A sandbox whose record puts its IPv6 rules in legacy and its IPv4 ones
// in nf_tables (a node whose ip6tables alternative is not its iptables')
// is programmed, checked and repaired family by family, as the audit does
// through For: nothing of ours lands in the other backend of a family.
func TestFamiliesInTwoBackends(t *testing.T) {
	requireRoot(t)
	n, ctx := newNS(t), context.Background()
	net := For(applied.Writer{Backend: release.NFT, BackendIPv6: release.Legacy}, xtables.Programmer{Runner: xtables.ExecRunner{}})
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
		t.Fatal(err)
	}
	heldIn(t, n, release.NFT, release.Legacy)
	if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
		t.Fatalf("Check after Program: %v %v", diffs, err)
	}
	ipt(t, n, release.Legacy, iptables.IPv6, func(i *goipt.IPTables) {
		if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
			t.Fatal(err)
		}
	})
	if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "missing rule") {
		t.Fatalf("Check after deleting IPv6's catch-all: %v %v", diffs, err)
	}
	if err := net.Reconcile(ctx, n.Path(), m); err != nil {
		t.Fatal(err)
	}
	heldIn(t, n, release.NFT, release.Legacy)
	if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
		t.Errorf("Check after Reconcile: %v %v", diffs, err)
	}
}

// A sandbox no record names a writer for, whose IPv4 rules are in
// nf_tables and IPv6 rules in legacy (upstream's istio-cni, which detects
// each family's backend, on a node whose ip6tables alternative is not its
// iptables'): the audit's guess finds each family where it is, so the
// sandbox checks clean and a repair moves nothing.
func TestFindsEachFamilysBackend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, guess release.Backend) {
		n, ctx := newNS(t), context.Background()
		m := iptables.Build(iptables.DefaultSpec(), true, true)
		writeIn(t, n, m.V4, release.NFT)
		writeIn(t, n, m.V6, release.Legacy)
		if err := n.Do(func(ns.NetNS) error { return addPassthroughV6() }); err != nil {
			t.Fatal(err)
		}
		net := &Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: guess}, FindBackend: true}
		if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
			t.Errorf("guessed %s: Check of the sandbox as written: %q, %v", guess, diffs, err)
		}
		if err := net.Reconcile(ctx, n.Path(), m); err != nil {
			t.Fatal(err)
		}
		heldIn(t, n, release.NFT, release.Legacy)
	})
}

// failingV6Once runs every command for real but the first ip6tables-save
// it is asked to run, which fails.
type failingV6Once struct {
	xtables.ExecRunner
	failed atomic.Bool
}

func (r *failingV6Once) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	if strings.Contains(name, "ip6tables") && strings.HasSuffix(name, "-save") && r.failed.CompareAndSwap(false, true) {
		return nil, errors.New(name + ": failed here")
	}
	return r.ExecRunner.Run(ctx, stdin, name, args...)
}

// A repair of a running pod that fails for one family rolls that family
// back, as ADD would, and keeps the other repaired: rolled back with it,
// the pod's traffic would leave without the proxy until the next round.
func TestRepairRollsBackOnlyTheFamilyThatFailed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		n, ctx := newNS(t), context.Background()
		m := iptables.Build(iptables.DefaultSpec(), true, true)
		if _, err := netnsFor(b, nil).Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
			t.Fatal(err)
		}
		for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			ipt(t, n, b, fam, func(i *goipt.IPTables) {
				if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
					t.Fatal(err)
				}
			})
		}
		if err := netnsFor(b, &failingV6Once{}).Reconcile(ctx, n.Path(), m); err == nil {
			t.Fatal("Reconcile with an ip6tables-save failing: no error")
		}
		ipv4 := netnsFor(b, nil)
		if diffs, err := ipv4.Check(ctx, n.Path(), iptables.Build(iptables.DefaultSpec(), true, false)); err != nil || len(diffs) != 0 {
			t.Errorf("IPv4 after a repair that failed for IPv6 only: %q, %v", diffs, err)
		}
		ipt(t, n, b, iptables.IPv6, func(i *goipt.IPTables) {
			if chains, err := i.ListChains("nat"); err != nil || slices.Contains(chains, iptables.ChainOutput) {
				t.Errorf("IPv6 after its failed repair: chains %v, %v; want it rolled back", chains, err)
			}
		})
	})
}

// A sandbox no record names a writer for, holding IPv4's rules in both
// backends and IPv6's in the other only: the repair clears IPv4's second
// copy and leaves IPv6's only one where it is.
func TestRepairClearsOnlyTheDoubledFamily(t *testing.T) {
	requireRoot(t)
	n, ctx := newNS(t), context.Background()
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	writeIn(t, n, m.V4, release.Legacy, release.NFT)
	writeIn(t, n, m.V6, release.Legacy)
	net := &Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.NFT}, FindBackend: true}
	if err := net.Reconcile(ctx, n.Path(), m); err != nil {
		t.Fatal(err)
	}
	heldIn(t, n, release.NFT, release.Legacy)
}

// A repeated ADD's removal of the copy an earlier one left in legacy: a
// family whose rules nft holds whole loses its legacy copy; one whose
// rules are in legacy only (written there after all) keeps them.
func TestRemoveCopyOnlyWhereWholeElsewhere(t *testing.T) {
	requireRoot(t)
	n, ctx := newNS(t), context.Background()
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	writeIn(t, n, m.V4, release.Legacy, release.NFT)
	writeIn(t, n, m.V6, release.Legacy)
	earlier := For(applied.Writer{Backend: release.Legacy}, xtables.Programmer{Runner: xtables.ExecRunner{}})
	if err := earlier.RemoveCopy(ctx, n.Path(), m); err != nil {
		t.Fatal(err)
	}
	heldIn(t, n, release.NFT, release.Legacy)
	// IPv4's nft rules short of one: its legacy copy would be the
	// whole one, and stays.
	n2 := newNS(t)
	writeIn(t, n2, m.V4, release.Legacy, release.NFT)
	ipt(t, n2, release.NFT, iptables.IPv4, func(i *goipt.IPTables) {
		if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
			t.Fatal(err)
		}
	})
	if err := earlier.RemoveCopy(ctx, n2.Path(), iptables.Build(iptables.DefaultSpec(), true, false)); err != nil {
		t.Fatal(err)
	}
	if diffs, err := earlier.Check(ctx, n2.Path(), iptables.Build(iptables.DefaultSpec(), true, false)); err != nil || len(diffs) != 0 {
		t.Errorf("legacy's IPv4 rules after a removal nft could not stand for: %q, %v", diffs, err)
	}
}

// writeIn writes one family's rules into the namespace in each backend,
// as a writer that trusts its restore does.
func writeIn(t *testing.T, n ns.NetNS, rs *iptables.Ruleset, backends ...release.Backend) {
	t.Helper()
	for _, b := range backends {
		if err := n.Do(func(ns.NetNS) error {
			_, err := (&xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: b}).Apply(context.Background(), rs, xtables.Write{Trusted: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// heldIn checks that istio-cni's chains are in v4 for IPv4 and v6 for
// IPv6, and in neither family's other backend.
func heldIn(t *testing.T, n ns.NetNS, v4, v6 release.Backend) {
	t.Helper()
	for fam, in := range map[iptables.Family]release.Backend{iptables.IPv4: v4, iptables.IPv6: v6} {
		for _, b := range backends {
			ipt(t, n, b, fam, func(i *goipt.IPTables) {
				chains, err := i.ListChains("nat")
				if err != nil {
					t.Fatal(err)
				}
				if held := slices.Contains(chains, iptables.ChainOutput); held != (b == in) {
					t.Errorf("%s in %s holds istio-cni's chains: %v; want them in %s only", fam, b, held, in)
				}
			})
		}
	}
}

// The audit's repair writes a family whose rules are in nf_tables in the
// node's own layout (Layouts), replacing what it held in one transaction,
// and one in legacy, or whose layout is not known, with iptables-restore,
// whether the record names the backends or the repair finds them.
func TestRepairWritesInTheNodesLayout(t *testing.T) {
	requireRoot(t)
	layout, why, ok := machineLayout()
	if !ok {
		t.Skipf("no layout of this machine's iptables (%s)", why)
	}
	for _, tc := range []struct {
		name    string
		writer  applied.Writer
		v6      release.Backend // where IPv6's rules are; IPv4's are in nft
		layouts func(iptables.Family) (nfnl.Layout, bool)
		want    []iptables.Family // replaced over netlink
	}{
		{"recorded", applied.Writer{Backend: release.NFT, BackendIPv6: release.Legacy}, release.Legacy,
			func(iptables.Family) (nfnl.Layout, bool) { return layout, true }, []iptables.Family{iptables.IPv4}},
		{"found", applied.Writer{Backend: release.Legacy, Guessed: true}, release.Legacy,
			func(iptables.Family) (nfnl.Layout, bool) { return layout, true }, []iptables.Family{iptables.IPv4}},
		{"both-nft", applied.Writer{Backend: release.NFT}, release.NFT,
			func(iptables.Family) (nfnl.Layout, bool) { return layout, true }, []iptables.Family{iptables.IPv4, iptables.IPv6}},
		{"no-layout-remembered", applied.Writer{Backend: release.NFT}, release.NFT, func(iptables.Family) (nfnl.Layout, bool) { return nfnl.Layout{}, false }, nil},
		{"no-layouts", applied.Writer{Backend: release.NFT}, release.NFT, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, ctx := newNS(t), context.Background()
			m := iptables.Build(iptables.DefaultSpec(), true, true)
			writeIn(t, n, m.V4, release.NFT)
			writeIn(t, n, m.V6, tc.v6)
			for fam, b := range map[iptables.Family]release.Backend{iptables.IPv4: release.NFT, iptables.IPv6: tc.v6} {
				ipt(t, n, b, fam, func(i *goipt.IPTables) {
					if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
						t.Fatal(err)
					}
				})
			}
			var mu sync.Mutex
			var replaced []iptables.Family
			net := For(tc.writer, xtables.Programmer{Runner: xtables.ExecRunner{}, Replacement: func(rs *iptables.Ruleset, l nfnl.Layout) error {
				if l != layout {
					t.Errorf("%s replaced in %s's layout, want %s's", rs.Family, l.Release(), layout.Release())
				}
				err := nfnl.Replace(rs, l)
				if err == nil {
					mu.Lock()
					replaced = append(replaced, rs.Family)
					mu.Unlock()
				}
				return err
			}})
			net.Layouts = tc.layouts
			if err := net.Reconcile(ctx, n.Path(), m); err != nil {
				t.Fatal(err)
			}
			slices.Sort(replaced)
			if !slices.Equal(replaced, tc.want) {
				t.Errorf("replaced over netlink: %v, want %v", replaced, tc.want)
			}
			if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
				t.Errorf("Check after the repair: %q, %v", diffs, err)
			}
		})
	}
}

// A repair whose transaction went in whole but whose read-back failed
// keeps the rules, which are the model: rolled back, the pod would be
// without a redirect until the next round. The repair still fails.
func TestRepairKeepsAWholeWriteNotReadBack(t *testing.T) {
	requireRoot(t)
	layout, why, ok := machineLayout()
	if !ok {
		t.Skipf("no layout of this machine's iptables (%s)", why)
	}
	for _, name := range []string{"default", "tproxy"} { // TPROXY: and its policy route
		t.Run(name, func(t *testing.T) {
			n, ctx := newNS(t), context.Background()
			m := iptables.Build(iptablestest.Specs()[name], true, true)
			net := For(applied.Writer{Backend: release.NFT}, xtables.Programmer{Runner: &failingV6Once{}})
			net.Layouts = func(iptables.Family) (nfnl.Layout, bool) { return layout, true }
			if err := net.Reconcile(ctx, n.Path(), m); !errors.Is(err, xtables.ErrUnverified) {
				t.Fatalf("Reconcile with ip6tables-save failing after the write: %v, want ErrUnverified", err)
			}
			if diffs, err := netnsFor(release.NFT, nil).Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
				t.Errorf("after the unverified repair: %q, %v; want the model in both families", diffs, err)
			}
		})
	}
}

// A replacing write the kernel refuses, in a namespace holding rules of
// ours, is followed by a read and one restore that reconciles from it: a
// fresh namespace's restore on top would append the jumps twice first.
func TestRefusedReplaceReconcilesFromWhatIsThere(t *testing.T) {
	requireRoot(t)
	n, ctx := newNS(t), context.Background()
	m := iptables.Build(iptables.DefaultSpec(), true, false)
	writeIn(t, n, m.V4, release.NFT)
	ipt(t, n, release.NFT, iptables.IPv4, func(i *goipt.IPTables) {
		if err := i.Delete("nat", iptables.ChainOutput, "-j", iptables.ChainRedirect); err != nil {
			t.Fatal(err)
		}
	})
	r := &countingRunner{}
	net := For(applied.Writer{Backend: release.NFT}, xtables.Programmer{Runner: r, Replacement: func(*iptables.Ruleset, nfnl.Layout) error {
		return errors.New("refused here")
	}})
	net.Layouts = func(iptables.Family) (nfnl.Layout, bool) { return fakeLayout(), true }
	if err := net.Reconcile(ctx, n.Path(), m); err != nil {
		t.Fatal(err)
	}
	if got := r.restores.Load(); got != 1 {
		t.Errorf("%d restores after the refusal, want 1", got)
	}
	if diffs, err := net.Check(ctx, n.Path(), m); err != nil || len(diffs) != 0 {
		t.Errorf("after the repair: %q, %v", diffs, err)
	}
}

// BenchmarkRepair is the audit's repair of a dual-stack pod whose IPv6
// rules are missing: in the node's layout over netlink, or with the
// image's iptables-restore (no layout known); both read back.
//
//	go test ./pkg/podnet -run '^$' -bench Repair -benchtime 100x
func BenchmarkRepair(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to create network namespaces")
	}
	layout, why, ok := machineLayout()
	if !ok {
		b.Skipf("no layout of this machine's iptables (%s)", why)
	}
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	v4, err := iptables.Plan(m.V4, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		layouts func(iptables.Family) (nfnl.Layout, bool)
	}{
		{"netlink", func(iptables.Family) (nfnl.Layout, bool) { return layout, true }},
		{"restore", nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			net := For(applied.Writer{Backend: release.NFT}, xtables.Programmer{Runner: xtables.ExecRunner{}})
			net.Layouts = tc.layouts
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				n := iptablestest.NewNS(b)
				if err := n.Do(func(ns.NetNS) error {
					_, err := xtables.ExecRunner{}.Run(ctx, v4, "iptables-nft-restore", "--noflush")
					return err
				}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := net.Reconcile(ctx, n.Path(), m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
