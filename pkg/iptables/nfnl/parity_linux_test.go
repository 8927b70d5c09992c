package nfnl_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// These tests write every golden spec both ways, with iptables-nft-restore
// and over netlink, into fresh network namespaces, and compare what the
// node's iptables-save prints and what the kernel holds, expression by
// expression.

func newNS(t testing.TB) ns.NetNS { return iptablestest.NewNS(t) }

func familyOf(f iptables.Family) uint8 {
	if f == iptables.IPv6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// requireLayout skips unless nfnl lays rules out as the machine's
// iptables-nft writes them, and returns that layout.
func requireLayout(t *testing.T) nfnl.Layout {
	t.Helper()
	return ownRelease(t).layout
}

// state is one family as iptables-save prints it (without its comment
// lines) and as the kernel dumps it.
type state struct{ save, kernel string }

// read is the state of n's family f, as rel's iptables-save prints it.
func read(t *testing.T, n ns.NetNS, f iptables.Family, rel iptablesRelease) state {
	t.Helper()
	var s state
	if err := n.Do(func(ns.NetNS) error {
		out, err := rel.run(t.Context(), nil, xtables.CommandsFor(release.NFT, f).Save)
		if err != nil {
			return err
		}
		s.save = withoutComments(out)
		s.kernel, err = nfnl.Dump(familyOf(f))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// withoutComments is iptables-save's text without its comment lines,
// which carry the time and the release.
func withoutComments(out []byte) string {
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// writtenBothWays runs check for every parity spec and family on two
// fresh namespaces holding its rules, one written by rel's
// iptables-nft-restore, one over netlink in rel's layout.
func writtenBothWays(t *testing.T, rel iptablesRelease, check func(t *testing.T, rs *iptables.Ruleset, byRestore, byNetlink ns.NetNS)) {
	for name, spec := range iptablestest.ParitySpecs() {
		for _, rs := range iptables.Build(spec, true, true).Rulesets() {
			t.Run(name+"/"+rs.Family.String(), func(t *testing.T) {
				byRestore, byNetlink := newNS(t), newNS(t)
				restore(t, byRestore, rs, rel)
				if err := write(byNetlink, rs, rel.layout); err != nil {
					t.Fatal(err)
				}
				check(t, rs, byRestore, byNetlink)
			})
		}
	}
}

func restore(t *testing.T, n ns.NetNS, rs *iptables.Ruleset, rel iptablesRelease) {
	t.Helper()
	text, err := iptables.Plan(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Do(func(ns.NetNS) error {
		_, err := rel.run(t.Context(), text, xtables.CommandsFor(release.NFT, rs.Family).Restore, "--noflush")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func write(n ns.NetNS, rs *iptables.Ruleset, l nfnl.Layout) error {
	return n.Do(func(ns.NetNS) error { return nfnl.Write(rs, l) })
}

func lineDiff(got, want string) string { return iptablestest.LineDiff(got, want, "netlink", "restore") }

// A namespace that already holds one of our chains is not fresh: the
// transaction fails as a whole and leaves the namespace as it was.
func TestWriteIntoUsedNamespaceChangesNothing(t *testing.T) {
	own := ownRelease(t)
	n := newNS(t)
	first := iptables.BuildFamily(iptablestest.Specs()["tproxy"], iptables.IPv4)
	if err := write(n, &first, own.layout); err != nil {
		t.Fatal(err)
	}
	before := read(t, n, iptables.IPv4, own)
	again := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	err := write(n, &again, own.layout)
	var kerr *nfnl.KernelError
	if !errors.As(err, &kerr) || !errors.Is(err, unix.EEXIST) {
		t.Fatalf("second write: got %v, want the kernel's EEXIST", err)
	}
	// The refused message is named, as rendered only on refusal.
	if want := "ipv4 chain nat ISTIO_INBOUND"; kerr.Op != want {
		t.Errorf("the refusal names %q, want %q", kerr.Op, want)
	}
	if after := read(t, n, iptables.IPv4, own); after != before {
		t.Errorf("a refused transaction changed the namespace\n%s", lineDiff(after.kernel, before.kernel))
	}
}

// Only the last message asks for an ack: a refusal of that very message,
// and of one before it, is still seen, and nothing is committed. So are
// refusals of more messages than a default socket buffer holds replies
// for (400).
func TestWriteSeesEveryRefusal(t *testing.T) {
	own := ownRelease(t)
	for name, c := range map[string]struct{ at, count int }{
		"the last message": {-1, 1}, "a message in the middle": {3, 1}, "400 messages": {3, 400},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNS(t)
			rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
			var bad []iptables.Rule
			for range c.count {
				bad = append(bad, iptables.Rule{Table: "nat", Chain: iptables.Output, Target: iptables.Jump{Chain: "ISTIO_UNDECLARED"}})
			}
			if c.at < 0 {
				rs.Rules = append(rs.Rules, bad...)
			} else {
				rs.Rules = append(rs.Rules[:c.at:c.at], append(bad, rs.Rules[c.at:]...)...)
			}
			err := write(n, &rs, own.layout)
			var kerr *nfnl.KernelError
			if !errors.As(err, &kerr) || !strings.Contains(kerr.Op, "ISTIO_UNDECLARED") || errors.Is(err, nfnl.ErrUnknownOutcome) {
				t.Fatalf("got %.300v, want the kernel's refusal of the jump to ISTIO_UNDECLARED", err)
			}
			if got := read(t, n, iptables.IPv4, own); strings.Contains(got.kernel, "ISTIO") {
				t.Errorf("a refused transaction wrote rules:\n%s", got.kernel)
			}
		})
	}
}

// BenchmarkWrite is one pod's IPv4 rules written into a fresh namespace.
func BenchmarkWrite(b *testing.B) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	layout, _ := nfnl.LayoutOf("1.8.9")
	benchInFreshNS(b, func(n ns.NetNS) error { return write(n, &rs, layout) })
}

// benchInFreshNS times f, each time in a namespace made for it (untimed).
func benchInFreshNS(b *testing.B, f func(ns.NetNS) error) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to create network namespaces")
	}
	for b.Loop() {
		b.StopTimer()
		n, err := testutils.NewNS()
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		err = f(n)
		b.StopTimer()
		_ = n.Close()
		_ = testutils.UnmountNS(n)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// The REDIRECT the netlink path writes redirects: a connection from a
// process that is not the proxy, to an address out of an interface, lands
// on the proxy's outbound port.
func TestWrittenRedirectRedirects(t *testing.T) {
	l := requireLayout(t)
	n := newNS(t)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := write(n, &rs, l); err != nil {
		t.Fatal(err)
	}
	if err := n.Do(func(ns.NetNS) error { return dialThroughRedirect() }); err != nil {
		t.Fatal(err)
	}
}

// dialThroughRedirect dials an address nothing answers at from the calling
// thread's namespace, which holds DefaultSpec's IPv4 rules, and fails
// unless the proxy's port takes the connection.
func dialThroughRedirect() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	if _, err := netlink.LinkByName("eth0"); err != nil {
		eth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}
		if err := netlink.LinkAdd(eth); err != nil {
			return err
		}
		if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(192, 0, 2, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(eth); err != nil {
			return err
		}
		if peer, err := netlink.LinkByName("peer0"); err != nil || netlink.LinkSetUp(peer) != nil {
			return fmt.Errorf("bringing up the veth's peer: %w", err)
		}
	}
	proxy, err := net.Listen("tcp4", "127.0.0.1:15001")
	if err != nil {
		return err
	}
	defer proxy.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := proxy.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialTimeout("tcp4", "192.0.2.10:8080", 10*time.Second)
	if err != nil {
		return fmt.Errorf("dialing 192.0.2.10:8080 (nothing listens there; only the redirect answers): %w", err)
	}
	c.Close()
	return <-accepted
}

func TestUnsupportedSendsNothing(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	rs.Rules = append(rs.Rules, iptables.Rule{Table: "filter", Chain: iptables.Output, Target: iptables.Return{}})
	layout, _ := nfnl.LayoutOf("1.8.9")
	if err := nfnl.Write(&rs, layout); !errors.Is(err, nfnl.ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
	// No layout: nothing to write as.
	ok := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := nfnl.Write(&ok, nfnl.Layout{}); !errors.Is(err, nfnl.ErrUnsupported) {
		t.Fatalf("the zero Layout: got %v, want ErrUnsupported", err)
	}
}

// A built-in chain that exists keeps its policy, as with iptables-restore.
func TestWriteKeepsABuiltinChainsPolicy(t *testing.T) {
	own := ownRelease(t)
	n := newNS(t)
	if err := n.Do(func(ns.NetNS) error {
		_, err := xtables.ExecRunner{}.Run(t.Context(), nil, "iptables-nft", "-t", "mangle", "-P", "PREROUTING", "DROP")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rs := iptables.BuildFamily(iptablestest.Specs()["drop-invalid"], iptables.IPv4)
	if err := write(n, &rs, own.layout); err != nil {
		t.Fatal(err)
	}
	if got := read(t, n, iptables.IPv4, own); !strings.Contains(got.save, ":PREROUTING DROP") {
		t.Errorf("the mangle PREROUTING policy changed:\n%s", got.save)
	}
}

// An error the kernel addresses to the batch as a whole (here: no
// CAP_NET_ADMIN) fails Write at once; it neither hangs nor succeeds.
func TestWriteWithoutCapabilityFails(t *testing.T) {
	own := ownRelease(t)
	n := newNS(t)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and its
		// reduced capabilities with it.
		runtime.LockOSThread()
		if err := n.Set(); err != nil {
			done <- err
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		done <- nfnl.Write(&rs, own.layout)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, unix.EPERM) {
			t.Errorf("got %v, want the kernel's EPERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write hung on a refused transaction")
	}
	if got := read(t, n, iptables.IPv4, own); strings.Contains(got.kernel, "ISTIO") {
		t.Errorf("a refused transaction wrote rules:\n%s", got.kernel)
	}
}
