package netnsdir

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/podnet/nsthread"
)

// sandbox is a real network namespace bound into dir under name, as the
// runtime binds a pod's, with addrs on its loopback interface (any
// interface's addresses count; this kernel has no dummy links).
func sandbox(t testing.TB, dir, name string, addrs ...string) uint64 {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	err = n.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, a := range addrs {
			p := netip.MustParsePrefix(a)
			ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
				return err
			}
		}
		return netlink.LinkSetUp(link)
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(n.Path(), path, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestFind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	dir := t.TempDir()
	start := time.Now().Add(-time.Minute)
	a := sandbox(t, dir, "cni-a", "198.51.100.10/24", "2001:db8::10/64")
	b := sandbox(t, dir, "cni-b", "198.51.100.11/24")
	sandbox(t, dir, "cni-c", "198.51.100.12/24")
	sandbox(t, dir, "cni-d", "198.51.100.12/24") // a namespace posing with c's address
	sandbox(t, dir, "cni-e", "198.51.100.13/24")
	sandbox(t, dir, "cni-f", "198.51.100.14/24")
	sandbox(t, dir, "cni-g", "198.51.100.15/24")
	// A link to a's namespace is not the runtime's: not followed.
	if err := os.Symlink(filepath.Join(dir, "cni-a"), filepath.Join(dir, "cni-link")); err != nil {
		t.Fatal(err)
	}

	res, err := Finder{Dir: dir, Since: start}.Find(map[string][]netip.Addr{
		"pod-a":      addrs("198.51.100.10", "2001:db8::10"),
		"pod-b":      addrs("::ffff:198.51.100.11"), // v4-mapped as some APIs spell it
		"pod-c":      addrs("198.51.100.12"),
		"pod-split":  addrs("198.51.100.14", "198.51.100.15"), // addresses in two namespaces: neither
		"pod-absent": addrs("198.51.100.99"),
		"pod-no-ip":  nil,
		// A meshed pod whose reported address went to a plain pod: the
		// namespace is the plain pod's, and neither is matched.
		"pod-stale-meshed": addrs("198.51.100.13"),
		"pod-plain-reuser": addrs("198.51.100.13"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NSFile{
		"pod-a": {Path: filepath.Join(dir, "cni-a"), Inode: a},
		"pod-b": {Path: filepath.Join(dir, "cni-b"), Inode: b},
	}
	if len(res.Found) != len(want) {
		t.Errorf("found %v, want %v", res.Found, want)
	}
	for uid, w := range want {
		if res.Found[uid] != w {
			t.Errorf("%s: %+v, want %+v", uid, res.Found[uid], w)
		}
	}
	var ambiguous []string
	for uid, why := range res.Ambiguous {
		ambiguous = append(ambiguous, uid)
		if why == "" {
			t.Errorf("%s: ambiguous without a reason", uid)
		}
	}
	slices.Sort(ambiguous)
	if want := []string{"pod-c", "pod-plain-reuser", "pod-stale-meshed"}; !slices.Equal(ambiguous, want) {
		t.Errorf("ambiguous %v, want %v", res.Ambiguous, want)
	}
	if why := res.Ambiguous["pod-stale-meshed"]; !strings.Contains(why, "pod-plain-reuser") {
		t.Errorf("the stale pod's reason does not name the other claimant: %q", why)
	}
	if res.Stale != 0 {
		t.Errorf("stale %d with every file bound", res.Stale)
	}
}

// A file the runtime created after the agent started but that this view
// does not see bound means the mount no longer propagates: Stale.
func TestFindStale(t *testing.T) {
	dir := t.TempDir()
	at := func(name string, ago time.Duration) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o444); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-ago)
		if err := os.Chtimes(path, then, then); err != nil {
			t.Fatal(err)
		}
	}
	at("cni-new", 30*time.Second)
	at("cni-old", time.Hour) // left behind before the agent started: not stale
	// Created this instant: the runtime binds the namespace to its file
	// just after creating it, and a scan can fall between (a burst of pod
	// starts has many): not stale yet.
	at("cni-binding", 0)
	// Unbound by a sandbox's teardown, which removes the file just after:
	// gone by the next scan, never stale.
	at("cni-unbinding", 30*time.Second)
	f := NewFinder(dir, time.Now().Add(-time.Minute))
	if res, err := f.Find(nil); err != nil || res.Stale != 0 {
		t.Errorf("first scan: %+v, %v; want none stale until a second scan finds the same file unbound", res, err)
	}
	if err := os.Remove(filepath.Join(dir, "cni-unbinding")); err != nil {
		t.Fatal(err)
	}
	res, err := f.Find(nil)
	if err != nil || res.Stale != 1 || len(res.Found) != 0 {
		t.Errorf("second scan: %+v, %v; want 1 stale", res, err)
	}
	// Another file made at the same path since is not the same file.
	if err := os.Remove(filepath.Join(dir, "cni-new")); err != nil {
		t.Fatal(err)
	}
	at("cni-new", 20*time.Second)
	if res, err := f.Find(nil); err != nil || res.Stale != 0 {
		t.Errorf("a file made anew: %+v, %v; want not stale at its first scan", res, err)
	}
	if res, err := (Finder{Dir: filepath.Join(dir, "absent")}).Find(nil); err != nil || len(res.Found) != 0 {
		t.Errorf("a missing directory: %+v, %v; want nothing found and no error (no sandbox yet)", res, err)
	}
}

func TestInode(t *testing.T) {
	f, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	ino, err := Inode(f)
	var st unix.Stat_t
	if err != nil || unix.Stat("/proc/self/ns/net", &st) != nil || st.Ino != ino {
		t.Errorf("Inode = %d, %v; stat says %d", ino, err, st.Ino)
	}
}

// Find moves one thread from namespace to namespace: every thread of the
// agent is back in the agent's own after, whatever it found, so that
// nothing the agent runs next lands in a pod's namespace.
func TestFindLeavesEveryThreadHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	dir := t.TempDir()
	sandbox(t, dir, "cni-a", "198.51.100.20/24")
	sandbox(t, dir, "cni-b", "198.51.100.21/24")
	if err := os.WriteFile(filepath.Join(dir, "not-a-namespace"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if res, err := (Finder{Dir: dir}).Find(map[string][]netip.Addr{"a": addrs("198.51.100.20")}); err != nil || len(res.Found) != 1 {
					t.Errorf("Find: %+v, %v", res, err)
				}
			}
		})
	}
	wg.Wait()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	home, err := nsthread.HomeInode()
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		var st unix.Stat_t
		if unix.Stat(task, &st) == nil && st.Ino != home {
			ns, _ := os.Readlink(task)
			t.Errorf("%s is in %s, not the agent's namespace", task, ns)
		}
	}
}

// BenchmarkFind is one audit pass's scan of a node's netns directory with
// 30 sandboxes: every pass makes one, a woken one too.
func BenchmarkFind(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	dir := b.TempDir()
	pods := map[string][]netip.Addr{}
	for i := range 30 {
		addr := netip.AddrFrom4([4]byte{10, 7, byte(i / 200), byte(1 + i%200)})
		sandbox(b, dir, fmt.Sprint("cni-", i), addr.String()+"/32")
		pods[fmt.Sprint("uid-", i)] = []netip.Addr{addr}
	}
	f := Finder{Dir: dir}
	for b.Loop() {
		res, err := f.Find(pods)
		if err != nil || len(res.Found) != len(pods) {
			b.Fatalf("found %d of %d: %v", len(res.Found), len(pods), err)
		}
	}
}
