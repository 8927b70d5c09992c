package audit

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
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
	for _, w := range []Writer{{Backend: release.Legacy}, {Backend: release.NFT}, {Native: true}} {
		name := string(w.Backend)
		if w.Native {
			name = "native"
		}
		t.Run(name, func(t *testing.T) {
			network := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: w.Backend}, Native: w.Native}
			t.Cleanup(func() { _ = network.Cleanup(context.Background(), netns.Path()) })
			h := newHarness(t, Repair)
			h.a.deps.Network = func(got Writer) Network {
				if got != w {
					t.Errorf("the audit asked for writer %+v, the node's is %+v", got, w)
				}
				return network
			}
			h.a.cfg.Writer = w
			p := meshed("real")
			h.pods.pods = append(h.pods.pods, p)
			h.ns[string(p.UID)] = netnsdir.NSFile{Path: netns.Path(), Inode: inodeOf(netns.Path())}
			ctx := context.Background()
			h.a.pass(ctx, nil)
			h.clock.advance(2 * time.Second)
			h.a.pass(ctx, nil)
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
