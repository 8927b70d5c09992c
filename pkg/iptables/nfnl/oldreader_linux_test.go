package nfnl_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// oldReaderEnv names the unpacked oldest iptables (`make old-iptables`).
// make test sets it, and then a reader that is missing fails the test
// rather than skipping it.
const oldReaderEnv = "ISTIO_CNI_OLD_IPTABLES"

// oldReaderRelease is the release test/oldiptables/fetch.sh pins.
const oldReaderRelease = "v1.8.7"

// oldReader is an iptables-nft older than release.Layout, run from where it was
// unpacked with its own libraries and extensions: what a user's debug
// image or an older node tool would print for a pod's rules.
type oldReader struct{ multi, libs, exts string }

func findOldReader(t *testing.T) oldReader {
	t.Helper()
	dir, required := os.LookupEnv(oldReaderEnv)
	if !required {
		dir = filepath.Join("..", "..", "..", "_output", "tools", "iptables-1.8.7")
	}
	multi := filepath.Join(dir, "usr", "sbin", "xtables-nft-multi")
	libs, _ := filepath.Glob(filepath.Join(dir, "usr", "lib", "*", "libxtables.so.12"))
	if _, err := os.Stat(multi); err != nil || len(libs) != 1 {
		if required {
			t.Fatalf("%s=%s holds no unpacked iptables (xtables-nft-multi: %v; libxtables: %d found); run `make old-iptables`", oldReaderEnv, dir, err, len(libs))
		}
		t.Skipf("no oldest iptables in %s: run `make old-iptables`", dir)
	}
	lib := filepath.Dir(libs[0])
	r := oldReader{multi: multi, libs: lib, exts: filepath.Join(lib, "xtables")}
	out, err := r.command("iptables-save", "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "iptables-save "+oldReaderRelease+" ") {
		t.Fatalf("%s --version: %q, %v; want %s", multi, out, err, oldReaderRelease)
	}
	return r
}

func (r oldReader) command(args ...string) *exec.Cmd {
	cmd := exec.Command(r.multi, args...) // #nosec G204 -- the test's own unpacked binary
	// Its own libxtables and libnftnl (the machine's newer ones share
	// their sonames) and its own extensions, never the node's.
	cmd.Env = []string{"LD_LIBRARY_PATH=" + r.libs, "XTABLES_LIBDIR=" + r.exts}
	return cmd
}

// save is the old iptables-save's text for one family in n, without its
// comment lines; anything it says on stderr fails the test.
func (r oldReader) save(t *testing.T, n ns.NetNS, f iptables.Family) string {
	t.Helper()
	name := "iptables-save"
	if f == iptables.IPv6 {
		name = "ip6tables-save"
	}
	var text string
	if err := n.Do(func(ns.NetNS) error {
		cmd := r.command(name)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil && stderr.Len() > 0 {
			t.Errorf("%s %s printed on stderr: %s", oldReaderRelease, name, stderr.String())
		}
		text = withoutComments(out)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return text
}

// The oldest iptables 1.8 Debian serves prints the netlink writer's rules
// exactly as it prints what the node's iptables-nft-restore writes, for
// every golden spec and family. Older releases decode some of release.Layout's
// encodings wrongly (1.8.7 prints "-p tcp --dport 15008" as "-p tcp"):
// the same wrong text for both writers is what "no difference" means
// here; the kernel-level parity is TestWriteMatchesRestore's.
func TestOldestReaderSeesNoDifference(t *testing.T) {
	requireLayout(t)
	old := findOldReader(t)
	writtenBothWays(t, func(t *testing.T, rs *iptables.Ruleset, byRestore, byNetlink ns.NetNS) {
		want, got := old.save(t, byRestore, rs.Family), old.save(t, byNetlink, rs.Family)
		// It read every rule, not just the chains (it misprints some of a
		// rule's matches, never the rule itself).
		if rules := strings.Count(want, "\n-A "); rules != len(rs.Rules) {
			t.Fatalf("%s printed %d of the %d restored rules:\n%s", oldReaderRelease, rules, len(rs.Rules), want)
		}
		if got != want {
			t.Errorf("iptables-save %s differs\n%s", oldReaderRelease, lineDiff(got, want))
		}
	})
}
