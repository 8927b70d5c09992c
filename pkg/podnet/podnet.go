// Package podnet is the plugin's one OS step: it enters a pod's network
// namespace and programs, checks or removes the redirect there.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/podnet/nsthread"
)

// Network programs pods' network namespaces: with a Programmer
// (iptables), or, Native, with upstream's native nftables ruleset
// (native.go).
type Network struct {
	Programmer *xtables.Programmer
	Native     bool
	// FindBackend: for a sandbox no record names a writer for, a Check
	// that finds Programmer's backend short reads the rules where they
	// are (xtables.Programmer.Holding), and Reconcile repairs them there,
	// clearing ours from the other backend if both held some.
	FindBackend bool
	// Layouts, if set, is how the node's own iptables-nft lays out a
	// family's rules: Reconcile writes a family whose backend is nft so,
	// replacing what it held in one transaction (xtables.Write.Replace),
	// where the image's iptables-restore would write its own release's
	// encoding, which another release's iptables-save can misprint.
	// Asked only when a repair runs.
	Layouts func(iptables.Family) (nfnl.Layout, bool)
}

// For is the Network that reads and writes a sandbox's rules as w says
// ADD wrote them (applied.Record.Writer), with p's runner and memory.
func For(w applied.Writer, p xtables.Programmer) *Network {
	p.Backend, p.BackendIPv6 = w.Backend, w.BackendIPv6
	return &Network{Programmer: &p, Native: w.Native, FindBackend: w.Guessed}
}

// passthroughV6 is the source Envoy binds for IPv6 inbound passthrough.
// IPv4 has all of 127/8 on lo; IPv6 has only ::1, so the plugin adds it, as
// istio-iptables does.
var passthroughV6 = &net.IPNet{IP: net.ParseIP("::6"), Mask: net.CIDRMask(128, 128)}

// ErrNoNetns means the namespace path does not exist (any more);
// ErrOpenNetns that it exists but cannot be opened as a namespace.
var (
	ErrNoNetns   = errors.New("network namespace does not exist")
	ErrOpenNetns = errors.New("cannot open network namespace")
	// ErrPanic: the work in the namespace panicked (a bug); the step
	// failed and the namespace was restored.
	ErrPanic = errors.New("panic")
)

// rollbackBudget bounds removing what a failed ADD programmed. It has its
// own deadline: the failure may have used up the caller's.
const rollbackBudget = 10 * time.Second

// do runs fn inside the namespace at path, on a locked OS thread; iptables
// processes started there inherit the namespace. The thread is the
// scheduler's again once it is home (pkg/podnet/nsthread, which knows home
// without reading /proc each time: the node agent runs an ADD for every
// pod). fn gets the Programmer for the namespace: n's, or, for a
// namespace another user namespace owns, n's run as that namespace's root
// (xtables.Programmer.InUserNS).
func (n *Network) do(path string, fn func(p *xtables.Programmer) error) error {
	// O_NONBLOCK: a FIFO at the path must not hold the caller in open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s: %w", path, ErrNoNetns)
	}
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrOpenNetns, path, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fmt.Errorf("%w %s: %w", ErrOpenNetns, path, err)
	}
	// nsfs; procfs on kernels before 3.19, as containernetworking's ns.GetNS.
	if sfs.Type != unix.NSFS_MAGIC && sfs.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("%w %s: not a namespace (filesystem magic %#x)", ErrOpenNetns, path, sfs.Type)
	}
	p := n.Programmer
	if p != nil {
		owner, err := foreignOwner(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if owner != nil {
			defer func() { _ = owner.Close() }()
			if p, err = p.InUserNS(owner); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	return nsthread.In(fd, func() (err error) {
		// A bug in what runs here must fail this pod's step, not end the
		// process: the node agent runs ADDs for the shim.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w in %s: %v", ErrPanic, path, r)
			}
		}()
		return fn(p)
	})
}

// Enter runs fn inside the namespace at path, on a locked OS thread; commands
// fn starts run there too (in the process's own user namespace).
func Enter(path string, fn func() error) error {
	return (&Network{}).do(path, func(*xtables.Programmer) error { return fn() })
}

// Program installs the model in the namespace and verifies it; on failure
// nothing of ours is left behind. The families are programmed at once, each
// from its own thread in the namespace: a dual-stack pod waits for one
// restore and one read-back, not two of each. w is how each family's
// rules go in (xtables.Write), and the answer says how each was written.
// With w.Only, what a failure wrote stays: the node agent hands the ADD
// back to the plugin, which reconciles from what the namespace holds.
func (n *Network) Program(ctx context.Context, path string, m iptables.Model, w xtables.Write) (map[iptables.Family]xtables.Written, error) {
	if n.Native {
		return n.programNative(ctx, path, m, w)
	}
	rollback := rollbackAll
	if w.Only {
		rollback = rollbackNone
	}
	return n.program(ctx, path, m, w, rollback)
}

// What a failed write removes: what it wrote in every family (ADD: the
// pod does not start), in the families that failed (a repair: the pod
// runs, and the families repaired redirect its traffic), or nothing (the
// plugin reconciles after the agent).
type rollbackScope int

const (
	rollbackAll rollbackScope = iota
	rollbackFailed
	rollbackNone
)

// program is Program for iptables.
func (n *Network) program(ctx context.Context, path string, m iptables.Model, w xtables.Write, rollback rollbackScope) (map[iptables.Family]xtables.Written, error) {
	rulesets := m.Rulesets()
	written := make([]xtables.Written, len(rulesets))
	errs := make([]error, len(rulesets))
	program := func(i int) {
		errs[i] = n.do(path, func(p *xtables.Programmer) (err error) {
			written[i], err = programFamily(ctx, p, rulesets[i], w)
			return err
		})
	}
	var wg sync.WaitGroup
	for i := 1; i < len(rulesets); i++ {
		wg.Go(func() { program(i) })
	}
	if len(rulesets) > 0 {
		program(0)
	}
	wg.Wait()
	byFamily := map[iptables.Family]xtables.Written{}
	for i, rs := range rulesets {
		byFamily[rs.Family] = written[i]
	}
	err := errors.Join(errs...)
	if err == nil || rollback == rollbackNone {
		return byFamily, err
	}
	undo := rulesets
	if rollback == rollbackFailed {
		// A family half written (mangle's TPROXY marks without their
		// route, nat's DNS redirect without raw's zones) can break
		// what a rollback leaves flowing: the failed ones go. One
		// written whole and only not read back stays: it is the
		// model, and the pod would go without a redirect.
		undo = nil
		for i, rs := range rulesets {
			if errs[i] != nil && !errors.Is(errs[i], xtables.ErrUnverified) {
				undo = append(undo, rs)
			}
		}
	}
	return byFamily, n.rollback(ctx, path, undo, err)
}

// Reconcile makes the namespace hold the model, whatever it holds now, and
// verifies it: Program as the audit's repair runs it, always reading
// back, in the node's layout where Layouts knows it. A failure rolls back
// the families that failed only: the pod is running, and a family
// repaired redirects its traffic whatever another's write did.
func (n *Network) Reconcile(ctx context.Context, path string, m iptables.Model) error {
	if n.Native {
		_, err := n.Program(ctx, path, m, xtables.Write{})
		return err
	}
	if !n.FindBackend {
		_, err := n.program(ctx, path, m, n.repairWrite(n.Programmer, m), rollbackFailed)
		return err
	}
	var found *xtables.Programmer
	var also []iptables.Family
	if err := n.do(path, func(p *xtables.Programmer) error {
		found, also = p.Holding(ctx, m)
		return nil
	}); err != nil {
		return err
	}
	at := &Network{Programmer: n.Programmer.WithBackends(found.BackendFor(iptables.IPv4), found.BackendFor(iptables.IPv6))}
	if _, err := at.program(ctx, path, m, n.repairWrite(at.Programmer, m), rollbackFailed); err != nil {
		return err
	}
	if len(also) == 0 {
		return nil
	}
	// Ours in both backends of a family: the other's could take a
	// connection's NAT decision first. The model is whole where found
	// now; the policy routes are the model's, whichever backend holds
	// it, and stay.
	return n.do(path, func(p *xtables.Programmer) error {
		var errs []error
		for _, f := range also {
			errs = append(errs, p.WithBackend(found.BackendFor(f).Other()).Cleanup(ctx, f))
		}
		return errors.Join(errs...)
	})
}

// repairWrite is how Reconcile writes: each family whose backend is nft
// and whose node layout is known replaces its rules over netlink in that
// layout (then reads back); the others restore and read back.
func (n *Network) repairWrite(p *xtables.Programmer, m iptables.Model) xtables.Write {
	var w xtables.Write
	if n.Layouts == nil {
		return w
	}
	for _, rs := range m.Rulesets() {
		if b, err := p.BackendFor(rs.Family).Resolve(rs.Family == iptables.IPv6); err != nil || b != release.NFT {
			continue
		}
		if l, ok := n.Layouts(rs.Family); ok {
			if w.Netlink == nil {
				w.Netlink, w.Replace = map[iptables.Family]nfnl.Layout{}, true
			}
			w.Netlink[rs.Family] = l
		}
	}
	return w
}

// programFamily writes one family's ruleset from a thread in the namespace.
func programFamily(ctx context.Context, p *xtables.Programmer, rs *iptables.Ruleset, w xtables.Write) (xtables.Written, error) {
	if rs.Family == iptables.IPv6 {
		if err := addPassthroughV6(); err != nil {
			return xtables.Written{}, err
		}
	}
	written, err := p.Apply(ctx, rs, w)
	if err != nil && !errors.Is(err, xtables.ErrUnverified) {
		return written, err
	}
	if rs.Route != nil {
		if rerr := addPolicyRoute(rs.Family, rs.Route); rerr != nil {
			if err != nil {
				// Half written, not only unverified: rolled back,
				// so ErrUnverified is no longer to be found in it.
				rerr = errors.Join(errors.New(err.Error()), rerr)
			}
			return written, rerr
		}
	}
	return written, err
}

// rollback removes what a failed Program wrote.
func (n *Network) rollback(ctx context.Context, path string, rulesets []*iptables.Ruleset, err error) error {
	var families []iptables.Family
	for _, rs := range rulesets {
		families = append(families, rs.Family)
	}
	rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
	defer cancel()
	if rbErr := n.do(path, func(p *xtables.Programmer) error {
		return errors.Join(p.Cleanup(rbCtx, families...), removePolicyRoutes(families...))
	}); rbErr != nil {
		err = errors.Join(err, fmt.Errorf("rolling back: %w", rbErr))
	}
	return err
}

// Check lists how the namespace differs from the model.
func (n *Network) Check(ctx context.Context, path string, m iptables.Model) ([]string, error) {
	if n.Native {
		return n.checkNative(path, m)
	}
	var diffs []string
	err := n.do(path, func(p *xtables.Programmer) error {
		var err error
		if diffs, err = p.Check(ctx, m); err != nil {
			return err
		}
		if n.FindBackend && len(diffs) > 0 {
			found, also := p.Holding(ctx, m)
			if found.Backend != p.Backend || found.BackendIPv6 != p.BackendIPv6 {
				if diffs, err = found.Check(ctx, m); err != nil {
					return err
				}
			}
			for _, f := range also {
				diffs = append(diffs, fmt.Sprintf("%s: istio-cni's chains in iptables %s too", f, found.BackendFor(f).Other()))
			}
		}
		routed := map[iptables.Family]*iptables.PolicyRoute{}
		for _, rs := range m.Rulesets() {
			routed[rs.Family] = rs.Route
		}
		d, err := routeAndAddressDiffs(routed, m.V6 != nil)
		diffs = append(diffs, d...)
		return err
	})
	return diffs, err
}

// Holding is the iptables writer of the model's rules in the namespace at
// path, family by family, as found there (xtables.Programmer.Holding).
func (n *Network) Holding(ctx context.Context, path string, m iptables.Model) (w applied.Writer, err error) {
	if n.Programmer == nil {
		return applied.Writer{}, errors.New("podnet: no iptables programmer to read with")
	}
	err = n.do(path, func(p *xtables.Programmer) error {
		found, _ := p.Holding(ctx, m)
		w = applied.Writer{Backend: found.Backend, BackendIPv6: found.BackendIPv6}
		return nil
	})
	return w, err
}

// routeAndAddressDiffs is what CHECK reads besides the rules, from a
// thread in the namespace, whichever wrote them: each family's TPROXY
// policy route (nil: none), and ::6 on lo for a pod with IPv6.
func routeAndAddressDiffs(routes map[iptables.Family]*iptables.PolicyRoute, v6 bool) ([]string, error) {
	var diffs []string
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		if routes[f] == nil {
			continue
		}
		d, err := policyRouteDiffs(f, routes[f])
		if err != nil {
			return diffs, err
		}
		diffs = append(diffs, d...)
	}
	if v6 {
		ok, err := hasPassthroughV6()
		if err != nil {
			return diffs, err
		}
		if !ok {
			diffs = append(diffs, "lo lacks "+passthroughV6.String())
		}
	}
	return diffs, nil
}

// Cleanup removes everything of ours from both families.
func (n *Network) Cleanup(ctx context.Context, path string) error {
	if n.Native {
		return n.cleanupNative(ctx, path)
	}
	return n.do(path, func(p *xtables.Programmer) error {
		return errors.Join(p.Cleanup(ctx, iptables.IPv4, iptables.IPv6),
			removePolicyRoutes(iptables.IPv4, iptables.IPv6))
	})
}

// ClearRules removes the rules of ours that n's kind of writer writes,
// and nothing else: our native tables, or our iptables chains and the
// jumps into them in both families (with FindBackend, in whichever
// backend holds them, both if both do). The policy routes and ::6 stay:
// it clears what another writer left in a sandbox whose redirect is now
// n's other's, whose model they are.
func (n *Network) ClearRules(ctx context.Context, path string) error {
	if n.Native {
		return n.do(path, func(*xtables.Programmer) error { return nfnl.DeleteNative() })
	}
	return n.do(path, func(p *xtables.Programmer) error {
		errs := []error{p.Cleanup(ctx, iptables.IPv4, iptables.IPv6)}
		if !n.FindBackend {
			return errors.Join(errs...)
		}
		for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
			other := p.WithBackend(p.BackendFor(f).Other())
			if other.Backend == "" {
				continue
			}
			// A read that fails finds nothing to clear: the other
			// backend may not exist on the node.
			if obs, err := other.Read(ctx, f); err == nil && !obs.Empty() {
				errs = append(errs, other.Cleanup(ctx, f))
			}
		}
		return errors.Join(errs...)
	})
}

// RemoveCopy removes, from each of m's families, the copy of its rules in
// n's iptables backend for the family while they are whole in the other
// backend, read just before: the copy an earlier ADD left where a
// repeated one, which wrote m, no longer writes. A family whose rules the
// other backend does not hold whole (the repeated ADD wrote them in n's
// after all) keeps them. Policy routes stay: they are the model's.
func (n *Network) RemoveCopy(ctx context.Context, path string, m iptables.Model) error {
	if n.Native {
		return errors.New("podnet: RemoveCopy is for iptables copies")
	}
	return n.do(path, func(p *xtables.Programmer) error {
		var errs []error
		for _, rs := range m.Rulesets() {
			other := p.BackendFor(rs.Family).Other()
			if other == "" {
				continue
			}
			obs, err := p.WithBackend(other).Read(ctx, rs.Family)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(iptables.Diff(rs, obs)) == 0 {
				errs = append(errs, p.Cleanup(ctx, rs.Family))
			}
		}
		return errors.Join(errs...)
	})
}

// HasIPv6 reports whether any interface in the namespace has a global IPv6
// address: the fallback when the runtime passed no prevResult.
func (n *Network) HasIPv6(path string) (bool, error) {
	var found bool
	// No Programmer: reading addresses needs no user namespace's root.
	err := (&Network{}).do(path, func(*xtables.Programmer) (err error) {
		found, err = hasGlobalIPv6()
		return err
	})
	return found, err
}

// hasGlobalIPv6 is HasIPv6 for the calling thread's namespace: one
// RTM_GETADDR dump (syscall.NetlinkRIB, on a blocking socket; vishvananda's
// AddrList registers its socket with Go's poller first: twice the system
// calls, 50 µs more per ADD here). An address with a peer carries its own
// in IFA_LOCAL, the peer's in IFA_ADDRESS: either being global counts. A
// kernel without IPv6 answers the dump with every family's addresses, so
// each message's family is checked; an interrupted dump is an error.
func hasGlobalIPv6() (bool, error) {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETADDR, syscall.AF_INET6)
	if err != nil {
		return false, fmt.Errorf("listing addresses: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return false, fmt.Errorf("listing addresses: %w", err)
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
			return false, errors.New("listing addresses: the dump was interrupted")
		}
		// The message's first byte is its ifaddrmsg's family.
		if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg || m.Data[0] != syscall.AF_INET6 {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return false, fmt.Errorf("listing addresses: %w", err)
		}
		for _, a := range attrs {
			if (a.Attr.Type == syscall.IFA_ADDRESS || a.Attr.Type == syscall.IFA_LOCAL) && len(a.Value) == net.IPv6len &&
				netip.AddrFrom16([16]byte(a.Value)).IsGlobalUnicast() {
				return true, nil
			}
		}
	}
	return false, nil
}

func addPassthroughV6() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := netlink.AddrReplace(lo, &netlink.Addr{IPNet: passthroughV6}); err != nil {
		return fmt.Errorf("adding %s to lo: %w", passthroughV6, err)
	}
	return nil
}

func hasPassthroughV6() (bool, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return false, fmt.Errorf("finding lo: %w", err)
	}
	addrs, err := netlink.AddrList(lo, netlink.FAMILY_V6)
	if err != nil {
		return false, fmt.Errorf("listing lo addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IP.Equal(passthroughV6.IP) {
			return true, nil
		}
	}
	return false, nil
}
