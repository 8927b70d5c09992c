package audit

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// TestRepairInRealNamespace repairs a real namespace with iptables run as
// the agent runs it (its own copy, found on PATH, in each backend), and
// with native nftables over netlink, and proves the result with the
// plugin's CHECK logic.
func TestRepairInRealNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Close(); _ = testutils.UnmountNS(netns) })
	for _, w := range []applied.Writer{{Backend: release.Legacy}, {Backend: release.NFT}, {Backend: release.NFT, Native: true}} {
		name := string(w.Backend)
		if w.Native {
			name = "native"
		}
		t.Run(name, func(t *testing.T) {
			network := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: w.Backend}, Native: w.Native}
			t.Cleanup(func() { _ = network.Cleanup(context.Background(), netns.Path()) })
			h := newHarness(t, Repair)
			h.a.deps.Network = func(got applied.Writer) Network {
				switch got {
				case w, w.Guess(): // no record: the node's, a guess
					return network
				case w.OtherKind(): // no record: where else they may be
					return podnet.For(got, xtables.Programmer{Runner: xtables.ExecRunner{}})
				}
				t.Errorf("the audit asked for writer %+v, the node's is %+v", got, w)
				return network
			}
			h.a.cfg.Writer = w
			p := meshed("real")
			h.pods.pods = append(h.pods.pods, p)
			h.ns[string(p.UID)] = netnsdir.NSFile{Path: netns.Path(), Inode: inodeOf(netns.Path())}
			ctx := context.Background()
			h.pastConfirm(ctx)
			if testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")) != 1 {
				t.Fatalf("events %q", h.drainEvents())
			}
			m := decision.Rules(mustDecide(t, p), decision.DefaultNodeSettings(), true, false)
			diffs, err := network.Check(ctx, netns.Path(), m)
			if err != nil || len(diffs) != 0 {
				t.Fatalf("after the repair CHECK says %v, %v", diffs, err)
			}
		})
	}
}

// TestUnrecordedPodReadWhereItsRulesAre: a sandbox no record names a
// writer for (upstream's istio-cni wrote it, detecting nft in the pod's
// namespace, or an older build with the node's iptables) whose rules are
// in the backend the node's guess is not is redirected, not repaired;
// one whose rules there are short is repaired there; one with ours in both
// backends keeps them whole in one; one with no rules anywhere is repaired
// with the node's backend.
func TestUnrecordedPodReadWhereItsRulesAre(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, tc := range []struct {
		name          string
		node, written release.Backend // written "": no rules
		// flushed: a chain of the model emptied in these backends.
		flushed []release.Backend
		// partial: the node's backend also holds the model with
		// ISTIO_OUTPUT emptied.
		partial bool
		repairs float64
		// whole: the backend holding the model afterwards, the other
		// none of ours.
		whole release.Backend
	}{
		{"node guesses nft, rules in legacy", release.NFT, release.Legacy, nil, false, 0, release.Legacy},
		{"node guesses legacy, rules in nft", release.Legacy, release.NFT, nil, false, 0, release.NFT},
		{"node guesses nft, rules in legacy short", release.NFT, release.Legacy, []release.Backend{release.Legacy}, false, 1, release.Legacy},
		{"ours in both, the guess's short", release.NFT, release.Legacy, nil, true, 1, release.NFT},
		{"no rules anywhere", release.NFT, "", nil, false, 1, release.NFT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, netns, m := unrecordedInNS(t, "unrecorded")
			ctx := context.Background()
			in := map[release.Backend]*podnet.Network{}
			for _, b := range []release.Backend{release.Legacy, release.NFT} {
				in[b] = &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: b}}
				t.Cleanup(func() { _ = in[b].Cleanup(context.Background(), netns) })
			}
			if tc.written != "" {
				if err := in[tc.written].Reconcile(ctx, netns, m); err != nil {
					t.Fatal(err)
				}
			}
			if tc.partial {
				if err := in[tc.node].Reconcile(ctx, netns, m); err != nil {
					t.Fatal(err)
				}
				flushOutput(t, netns, tc.node)
			}
			for _, b := range tc.flushed {
				flushOutput(t, netns, b)
			}
			h.a.cfg.Writer = applied.Writer{Backend: tc.node}
			h.a.deps.Network = func(w applied.Writer) Network {
				return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}}) // as the agent's
			}
			h.pastConfirm(ctx)
			if got := testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")); got != tc.repairs {
				t.Fatalf("%v repairs, want %v; events %q", got, tc.repairs, h.drainEvents())
			}
			if diffs, err := in[tc.whole].Check(ctx, netns, m); err != nil || len(diffs) != 0 {
				t.Errorf("afterwards %s holds %v, %v; want the model", tc.whole, diffs, err)
			}
			other := release.Legacy
			if tc.whole == release.Legacy {
				other = release.NFT
			}
			var obs *iptables.Observed
			err := podnet.Enter(netns, func() (err error) {
				obs, err = in[other].Programmer.Read(ctx, iptables.IPv4)
				return err
			})
			if err != nil || !obs.Empty() {
				t.Errorf("afterwards %s holds %v, %v; want none of ours", other, obs.OursListing(), err)
			}
		})
	}
}

// TestUnrecordedPodReadInTheOtherWriter: a sandbox no record names a
// writer for whose rules are whole as the other writer writes them
// (switched from upstream's istio-cni with another
// global.nativeNftables: its iptables rules on a node now native, or its
// native tables on a node writing iptables) is redirected, not repaired
// over. One whose rules there are another pod's settings' (stale) is
// repaired with the node's writer, and the other writer's rules of ours
// go: a sandbox holds one redirect.
func TestUnrecordedPodReadInTheOtherWriter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	nft, legacy, native := applied.Writer{Backend: release.NFT}, applied.Writer{Backend: release.Legacy}, applied.Writer{Backend: release.NFT, Native: true}
	for _, tc := range []struct {
		name          string
		node, written applied.Writer
		stale         bool // written holds another spec's rules
		repairs       float64
	}{
		{"node native, rules in iptables-nft", native, nft, false, 0},
		{"node native, rules in iptables-legacy", native, legacy, false, 0},
		{"node iptables, rules native", nft, native, false, 0},
		{"node native, stale rules in iptables", native, nft, true, 1},
		{"node native, stale rules in iptables-legacy", native, legacy, true, 1},
		{"node iptables, stale native rules", nft, native, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, netns, m := unrecordedInNS(t, "switched")
			ctx := context.Background()
			at := func(w applied.Writer) *podnet.Network {
				n := podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}})
				t.Cleanup(func() { _ = n.Cleanup(context.Background(), netns) })
				return n
			}
			written := m
			if tc.stale {
				spec := iptables.DefaultSpec()
				spec.OutboundExclude = []uint16{5432}
				written = decision.Rules(decision.Decision{Redirect: true, Spec: spec}, decision.DefaultNodeSettings(), true, false)
			}
			if err := at(tc.written).Reconcile(ctx, netns, written); err != nil {
				t.Fatal(err)
			}
			h.a.cfg.Writer = tc.node
			h.a.deps.Network = func(w applied.Writer) Network {
				return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}}) // as the agent's
			}
			h.pastConfirm(ctx)
			if got := testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")); got != tc.repairs {
				t.Fatalf("%v repairs, want %v; events %q", got, tc.repairs, h.drainEvents())
			}
			whole, gone := tc.written, tc.node
			if tc.stale {
				whole, gone = tc.node, tc.written
			}
			if diffs, err := at(whole).Check(ctx, netns, m); err != nil || len(diffs) != 0 {
				t.Errorf("afterwards %+v holds %v, %v; want the model", whole, diffs, err)
			}
			if tc.repairs == 0 {
				if events := h.drainEvents(); len(events) != 0 {
					t.Errorf("events %q for a redirected pod", events)
				}
				return
			}
			if held := oursIn(t, netns, gone, m); len(held) != 0 {
				t.Errorf("afterwards %+v still holds %q; want none of ours", gone, held)
			}
		})
	}
}

// oursIn lists the rules of ours w's kind holds in the namespace at
// path: native tables, or iptables chains in each backend.
func oursIn(t *testing.T, path string, w applied.Writer, m iptables.Model) []string {
	t.Helper()
	var held []string
	err := podnet.Enter(path, func() error {
		if w.Native {
			rs := nftables.Of(m)
			var err error
			held, err = nfnl.ListNative(&rs)
			return err
		}
		for _, b := range []release.Backend{release.NFT, release.Legacy} {
			obs, err := (&xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: b}).Read(context.Background(), iptables.IPv4)
			if err != nil {
				return err
			}
			held = append(held, obs.OursListing()...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// unrecordedInNS is a harness whose node has one meshed pod, running in a
// new network namespace at path, that no record names; m is its model.
func unrecordedInNS(t testing.TB, name string) (h *harness, path string, m iptables.Model) {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Close(); _ = testutils.UnmountNS(netns) })
	h = newHarness(t, Repair)
	p := meshed(name)
	h.pods.pods = append(h.pods.pods, p)
	h.ns[string(p.UID)] = netnsdir.NSFile{Path: netns.Path(), Inode: inodeOf(netns.Path())}
	return h, netns.Path(), decision.Rules(mustDecide(t, p), decision.DefaultNodeSettings(), true, false)
}

// pastConfirm runs a pass, and another once the confirmation is over.
func (h *harness) pastConfirm(ctx context.Context) {
	h.a.pass(ctx, nil)
	h.clock.advance(2 * time.Second)
	h.a.pass(ctx, nil)
}

// flushOutput empties nat ISTIO_OUTPUT in b's tables of the namespace at
// path, as a tamperer with the node's iptables would.
func flushOutput(t *testing.T, path string, b release.Backend) {
	t.Helper()
	prog := "iptables-nft"
	if b == release.Legacy {
		prog = "iptables-legacy"
	}
	if out, err := exec.Command("nsenter", "--net="+path, prog, "-w", "-t", "nat", "-F", "ISTIO_OUTPUT").CombinedOutput(); err != nil { // #nosec G204 -- test
		t.Fatalf("%s -F ISTIO_OUTPUT: %v: %s", prog, err, out)
	}
}

// BenchmarkCheckRedirectedPod is the audit's cost per meshed pod and pass:
// one iptables-save of the pod's namespace, compared with the model.
func BenchmarkCheckRedirectedPod(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = netns.Close(); _ = testutils.UnmountNS(netns) })
	for _, backend := range []release.Backend{release.Legacy, release.NFT} {
		b.Run(string(backend), func(b *testing.B) {
			network := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: backend}}
			m := decision.Rules(decision.Decision{Redirect: true, Spec: iptablesDefault()}, decision.DefaultNodeSettings(), true, false)
			ctx := context.Background()
			if err := network.Reconcile(ctx, netns.Path(), m); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = network.Cleanup(ctx, netns.Path()) })
			for b.Loop() {
				if diffs, err := network.Check(ctx, netns.Path(), m); err != nil || len(diffs) > 0 {
					b.Fatal(diffs, err)
				}
			}
		})
	}
}

func iptablesDefault() iptables.Spec { return iptables.DefaultSpec() }

// BenchmarkCheckUnrecordedPod is the audit's cost per pass for a meshed
// pod no record names, its rules whole as the node's writer writes them,
// or as the other kind does (switched from upstream's istio-cni with
// another global.nativeNftables): each read as the agent reads it, an
// iptables state once printed by iptables-save then by its fingerprint.
func BenchmarkCheckUnrecordedPod(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	nft, native := applied.Writer{Backend: release.NFT}, applied.Writer{Backend: release.NFT, Native: true}
	for _, tc := range []struct {
		name          string
		node, written applied.Writer
	}{
		{"iptables node, iptables rules", nft, nft},
		{"iptables node, native rules", nft, native},
		{"native node, native rules", native, native},
		{"native node, iptables rules", native, nft},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, netns, m := unrecordedInNS(b, "bench")
			confirmed := xtables.NewConfirmed(nfnl.ReadFingerprint, legacy.Holds)
			h.a.cfg.Writer = tc.node
			h.a.deps.Network = func(w applied.Writer) Network {
				return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}, Confirmed: confirmed})
			}
			written := podnet.For(tc.written, xtables.Programmer{Runner: xtables.ExecRunner{}})
			ctx := context.Background()
			if err := written.Reconcile(ctx, netns, m); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = written.Cleanup(context.Background(), netns) })
			for b.Loop() {
				h.a.pass(ctx, nil)
			}
			if n := testutil.ToFloat64(h.metrics.Findings); n != 0 {
				b.Fatalf("%v findings; events %q", n, h.drainEvents())
			}
		})
	}
}
