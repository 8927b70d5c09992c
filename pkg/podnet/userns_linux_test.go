package podnet

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/test/podsim"
)

// newUserNS is newNS for a pod with hostUsers: false: its network
// namespace belongs to a user namespace mapping 0–65535 to 100000–165535.
func newUserNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := podsim.NewUserNSNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = podsim.CloseNetns(n) })
	loUp(t, n)
	return n
}

// The kernel refuses owner matches written from outside the pod's user
// namespace; every spec goes in, reads back as the model (uid 1337 as the
// pod sees it), checks clean, and is removed, on both backends.
func TestUserNamespacePod(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b release.Backend) {
		for name, spec := range iptablestest.Specs() {
			t.Run(name, func(t *testing.T) {
				n, ctx := newUserNS(t), context.Background()
				net := netnsFor(b, nil)
				m := iptables.Build(spec, true, true)
				if _, err := net.Program(ctx, n.Path(), m, xtables.Write{}); err != nil {
					t.Fatal(err)
				}
				if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
					t.Fatalf("Check: %v %v", d, err)
				}
				if err := net.Cleanup(ctx, n.Path()); err != nil {
					t.Fatal(err)
				}
				if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) == 0 {
					t.Fatalf("Check after Cleanup found the rules still there (%v)", err)
				}
			})
		}
	})
}

// Netlink cannot write them: the node agent, which writes only so, hands
// the ADD back; the plugin restores instead, and says why.
func TestUserNamespacePodNotOverNetlink(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	both := map[iptables.Family]nfnl.Layout{iptables.IPv4: fakeLayout(), iptables.IPv6: fakeLayout()}
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	net := netnsFor(release.NFT, nil)
	net.Programmer.Transaction = func(*iptables.Ruleset, nfnl.Layout) error {
		t.Error("a transaction was sent for a namespace another user namespace owns")
		return errors.New("unexpected")
	}

	n := newUserNS(t)
	if _, err := net.Program(ctx, n.Path(), m, xtables.Write{Netlink: both, Only: true}); !errors.Is(err, xtables.ErrNotWritten) || !errors.Is(err, xtables.ErrUserNS) {
		t.Fatalf("netlink only: %v, want ErrNotWritten and ErrUserNS", err)
	}
	written, err := net.Program(ctx, n.Path(), m, xtables.Write{Netlink: both})
	if err != nil {
		t.Fatal(err)
	}
	for f, w := range written {
		if w.Netlink || !errors.Is(w.Refused, xtables.ErrUserNS) {
			t.Errorf("%s written %+v, want by iptables-restore for ErrUserNS", f, w)
		}
	}
	if d, err := net.Check(ctx, n.Path(), m); err != nil || len(d) > 0 {
		t.Fatalf("Check: %v %v", d, err)
	}
}

// A writer that cannot enter the user namespace fails the step, naming
// why, before anything is written.
func TestUserNamespacePodNeedsAnEnteringRunner(t *testing.T) {
	requireRoot(t)
	n := newUserNS(t)
	_, err := netnsFor(release.NFT, recordingRunner{}).Program(context.Background(), n.Path(), iptables.Build(iptables.DefaultSpec(), true, false), xtables.Write{})
	if !errors.Is(err, xtables.ErrUserNS) || !strings.Contains(err.Error(), "hostUsers: false") {
		t.Fatalf("got %v, want ErrUserNS", err)
	}
}

// recordingRunner is a Runner that cannot run programs in another user
// namespace.
type recordingRunner struct{}

func (recordingRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	return xtables.ExecRunner{}.Run(ctx, stdin, name, args...)
}
