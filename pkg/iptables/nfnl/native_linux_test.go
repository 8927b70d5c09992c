package nfnl_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/test/podsim"
)

// These tests hold WriteNative to nft itself: every ruleset is loaded
// with `nft -f` in one fresh namespace and written over netlink in
// another, and the two must list, dump and diff alike.

// nft runs the machine's nft in n and returns its output.
func nft(t *testing.T, n ns.NetNS, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("nft")
	if err != nil {
		t.Fatalf("nft (Debian's nftables) is not installed: run make deps (%v)", err)
	}
	var out []byte
	err = n.Do(func(ns.NetNS) error {
		out, err = exec.CommandContext(t.Context(), path, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// loadWithNft loads a case's text into n with nft -f.
func loadWithNft(t *testing.T, n ns.NetNS, c nativeCase) {
	t.Helper()
	file := c.golden
	if file == "" {
		file = filepath.Join(t.TempDir(), c.name+".nft")
		if err := os.WriteFile(file, []byte(c.rs.Commands()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nft(t, n, "-f", file)
}

func writeNative(t *testing.T, n ns.NetNS, rs *nftables.Ruleset) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return nfnl.WriteNative(rs) }); err != nil {
		t.Fatal(err)
	}
}

func diffNative(t *testing.T, n ns.NetNS, rs *nftables.Ruleset) []string {
	t.Helper()
	var diff []string
	if err := n.Do(func(ns.NetNS) (err error) {
		diff, err = nfnl.DiffNative(rs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return diff
}

func dumpInet(t *testing.T, n ns.NetNS) string {
	t.Helper()
	var out string
	if err := n.Do(func(ns.NetNS) (err error) {
		out, err = nfnl.Dump(unix.NFPROTO_INET)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriteNativeAsNft: what WriteNative writes lists as what nft loads
// from the same text, holds the same expressions, and diffs as nothing;
// so does what nft loaded.
func TestWriteNativeAsNft(t *testing.T) {
	for _, c := range nativeCases(t) {
		t.Run(c.name, func(t *testing.T) {
			byNft, byNetlink := newNS(t), newNS(t)
			loadWithNft(t, byNft, c)
			writeNative(t, byNetlink, &c.rs)
			if got, want := nft(t, byNetlink, "list", "ruleset"), nft(t, byNft, "list", "ruleset"); got != want {
				t.Errorf("nft lists them apart (netlink: WriteNative's, restore: nft -f's)\n%s", lineDiff(got, want))
			}
			if got, want := dumpInet(t, byNetlink), dumpInet(t, byNft); got != want {
				t.Errorf("the kernel holds other expressions (netlink: WriteNative's, restore: nft -f's)\n%s", lineDiff(got, want))
			}
			for name, n := range map[string]ns.NetNS{"written by nft": byNft, "written over netlink": byNetlink} {
				if d := diffNative(t, n, &c.rs); len(d) > 0 {
					t.Errorf("DiffNative, %s:\n%s", name, strings.Join(d, "\n"))
				}
			}
		})
	}
}

// defaultNative is the default spec with every table.
func defaultNative() nftables.Ruleset {
	s := iptables.DefaultSpec()
	s.DNSCapture, s.TProxy, s.InvalidDrop = true, true, true
	return nftables.Build(s, true)
}

func TestWriteNativeTwiceIsOnce(t *testing.T) {
	n := newNS(t)
	rs := defaultNative()
	writeNative(t, n, &rs)
	once := nft(t, n, "list", "ruleset")
	writeNative(t, n, &rs)
	if twice := nft(t, n, "list", "ruleset"); twice != once {
		t.Errorf("a second write changed the ruleset\n%s", lineDiff(twice, once))
	}
	if d := diffNative(t, n, &rs); len(d) > 0 {
		t.Errorf("DiffNative: %s", strings.Join(d, "\n"))
	}
}

// firstHandle is the handle of a chain's first rule, as nft -a lists it.
func firstHandle(t *testing.T, n ns.NetNS, table, chain string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\t\t.* # handle (\d+)$`).FindStringSubmatch(nft(t, n, "-a", "list", "chain", "inet", table, chain))
	if m == nil {
		t.Fatalf("no rule in chain %s", chain)
	}
	return m[1]
}

// TestWriteNativeRestoresTamperedTables: DiffNative names each change to
// our tables, and WriteNative undoes it.
func TestWriteNativeRestoresTamperedTables(t *testing.T) {
	nat := nftables.TableNat
	for name, c := range map[string]struct {
		tamper func(t *testing.T, n ns.NetNS)
		want   string // in DiffNative's report
	}{
		"a rule deleted": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "delete", "rule", "inet", nat, "istio-output", "handle", firstHandle(t, n, nat, "istio-output"))
		}, "istio-output: missing rule tcp dport 15020 counter return"},
		"a rule added": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "add", "rule", "inet", nat, "istio-output", "counter", "accept")
		}, "istio-output: an unexpected rule (handle "},
		"a rule changed": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "replace", "rule", "inet", nat, "istio-output", "handle", firstHandle(t, n, nat, "istio-output"), "tcp", "dport", "15021", "counter", "return")
		}, "istio-output: missing rule tcp dport 15020 counter return"},
		"rules reordered": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "delete", "rule", "inet", nat, "istio-output", "handle", firstHandle(t, n, nat, "istio-output"))
			nft(t, n, "add", "rule", "inet", nat, "istio-output", "tcp", "dport", "15020", "counter", "return")
		}, "istio-output: the rules are in another order"},
		"a chain added": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "add", "chain", "inet", nat, "sneaky")
		}, "an unexpected chain sneaky"},
		"a policy changed": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "add", "chain", "inet", nat, "output", "{ type nat hook output priority -100 ; policy drop ; }")
		}, "chain output: type nat hook output priority -100; policy drop, want"},
		"the table made dormant": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "add", "table", "inet", nat, "{ flags dormant ; }")
		}, "table inet istio-proxy-nat: flags 0x1, want none"},
		"a table deleted": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "delete", "table", "inet", nftables.TableRaw)
		}, "table inet istio-proxy-raw: missing"},
		"a set added": {func(t *testing.T, n ns.NetNS) {
			nft(t, n, "add", "set", "inet", nat, "ports", "{ type inet_service ; }")
		}, "an unexpected set ports"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNS(t)
			rs := defaultNative()
			writeNative(t, n, &rs)
			want := nft(t, n, "list", "ruleset")
			c.tamper(t, n)
			d := diffNative(t, n, &rs)
			if !strings.Contains(strings.Join(d, "\n"), c.want) {
				t.Errorf("DiffNative says\n%s\nwant a line with %q", strings.Join(d, "\n"), c.want)
			}
			writeNative(t, n, &rs)
			if got := nft(t, n, "list", "ruleset"); got != want {
				t.Errorf("WriteNative left\n%s", lineDiff(got, want))
			}
			if d := diffNative(t, n, &rs); len(d) > 0 {
				t.Errorf("DiffNative after WriteNative: %s", strings.Join(d, "\n"))
			}
		})
	}
}

// A refused transaction changes nothing, and its error names the rule.
func TestWriteNativeRefusalChangesNothing(t *testing.T) {
	n := newNS(t)
	rs := defaultNative()
	writeNative(t, n, &rs)
	before := nft(t, n, "list", "ruleset")
	bad := defaultNative()
	bad.Tables[0].Rules = append(slices.Clone(bad.Tables[0].Rules),
		nftables.Rule{Chain: nftables.Output, Exprs: []nftables.Expr{nftables.Counter{}, nftables.Jump{Chain: "nowhere"}}})
	err := n.Do(func(ns.NetNS) error { return nfnl.WriteNative(&bad) })
	var kerr *nfnl.KernelError
	if !errors.As(err, &kerr) || !errors.Is(err, unix.ENOENT) {
		t.Fatalf("got %v, want the kernel's ENOENT", err)
	}
	if want := "rule inet istio-proxy-nat output counter jump nowhere"; kerr.Op != want {
		t.Errorf("the refusal names %q, want %q", kerr.Op, want)
	}
	if after := nft(t, n, "list", "ruleset"); after != before {
		t.Errorf("a refused write changed the ruleset\n%s", lineDiff(after, before))
	}
}

// A ruleset without a table removes a stale copy of it.
func TestWriteNativeRemovesAStaleTable(t *testing.T) {
	n := newNS(t)
	stale := defaultNative()
	writeNative(t, n, &stale)
	rs := nftables.Build(iptables.DefaultSpec(), false)
	d := diffNative(t, n, &rs)
	if want := "table inet istio-proxy-mangle: present, but the ruleset has no such table"; !strings.Contains(strings.Join(d, "\n"), want) {
		t.Errorf("DiffNative says\n%s\nwant %q", strings.Join(d, "\n"), want)
	}
	writeNative(t, n, &rs)
	if d := diffNative(t, n, &rs); len(d) > 0 {
		t.Errorf("DiffNative: %s", strings.Join(d, "\n"))
	}
	if got := nft(t, n, "list", "tables"); got != "table inet istio-proxy-nat\n" {
		t.Errorf("tables left:\n%s", got)
	}
}

// DeleteNative removes our tables and only ours; with none, it does
// nothing.
func TestDeleteNative(t *testing.T) {
	n := newNS(t)
	del := func() {
		t.Helper()
		if err := n.Do(func(ns.NetNS) error { return nfnl.DeleteNative() }); err != nil {
			t.Fatal(err)
		}
	}
	del()
	if d := diffNative(t, n, nil); len(d) > 0 {
		t.Errorf("DiffNative(nil) of an empty namespace: %s", strings.Join(d, "\n"))
	}
	rs := defaultNative()
	writeNative(t, n, &rs)
	nft(t, n, "add", "table", "inet", "filter")
	nft(t, n, "add", "chain", "inet", "filter", "input", "{ type filter hook input priority 0 ; }")
	nft(t, n, "add", "rule", "inet", "filter", "input", "tcp", "dport", "22", "accept")
	del()
	if got := nft(t, n, "list", "tables"); got != "table inet filter\n" {
		t.Errorf("tables left:\n%s", got)
	}
	if d := diffNative(t, n, nil); len(d) > 0 {
		t.Errorf("DiffNative(nil): %s", strings.Join(d, "\n"))
	}
	if got := nft(t, n, "list", "chain", "inet", "filter", "input"); !strings.Contains(got, "tcp dport 22 accept") {
		t.Errorf("the other table's rule is gone:\n%s", got)
	}
}

// In a pod's namespace owned by its own user namespace (hostUsers:
// false) the node's process, which holds CAP_NET_ADMIN over its owner,
// writes as in any other.
func TestWriteNativeInAUserNamespacesNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	n, err := podsim.NewUserNSNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := podsim.CloseNetns(n); err != nil {
			t.Error(err)
		}
	})
	rs := defaultNative()
	writeNative(t, n, &rs)
	if d := diffNative(t, n, &rs); len(d) > 0 {
		t.Errorf("DiffNative: %s", strings.Join(d, "\n"))
	}
	if got := nft(t, n, "list", "chain", "inet", nftables.TableNat, "istio-output"); !strings.Contains(got, "skuid 1337") {
		t.Errorf("no skuid 1337 rule:\n%s", got)
	}
}
