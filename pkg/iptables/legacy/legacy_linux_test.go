package legacy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/test/oldiptables"
)

// These tests write every parity spec both ways, with an
// iptables-legacy-restore (the machine's, and each release test/oldiptables
// unpacks) and with Write, into fresh network namespaces, and compare the
// tables the kernel then holds byte for byte, and what that release's
// iptables-legacy-save prints.

func newNS(t testing.TB) ns.NetNS { return iptablestest.NewNS(t) }

// programName is a family's iptables-legacy program: its restore or
// save, or "" for iptables-legacy itself.
func programName(f iptables.Family, verb string) string {
	name := "iptables-legacy"
	if f == iptables.IPv6 {
		name = "ip6tables-legacy"
	}
	if verb != "" {
		name += "-" + verb
	}
	return name
}

// program is the machine's iptables-legacy program, or a skip.
func program(t *testing.T, f iptables.Family, verb string) string {
	t.Helper()
	p, err := exec.LookPath(programName(f, verb))
	if err != nil {
		t.Skipf("no %s", programName(f, verb))
	}
	return p
}

// iptablesRelease runs one release's iptables-legacy programs, by name,
// in the calling thread's namespace.
type iptablesRelease struct {
	version string
	command func(name string, args ...string) (*exec.Cmd, error)
}

// own is the machine's release.
var own = iptablesRelease{version: "own", command: func(name string, args ...string) (*exec.Cmd, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	return exec.Command(p, args...), nil // #nosec G204 -- the machine's iptables
}}

// run runs one of rel's programs in n.
func (rel iptablesRelease) run(t *testing.T, n ns.NetNS, stdin []byte, name string, args ...string) string {
	t.Helper()
	var out []byte
	if err := n.Do(func(ns.NetNS) error {
		cmd, err := rel.command(name, args...)
		if err != nil {
			return err
		}
		cmd.Stdin = bytes.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err = cmd.Output(); err != nil {
			return fmt.Errorf("iptables %s %s: %w: %s", rel.version, name, err, stderr.String())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func restoreBy(t *testing.T, rel iptablesRelease, n ns.NetNS, rs *iptables.Ruleset) {
	t.Helper()
	text, err := iptables.Plan(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	// -w: the machine's lock, which other tests' writers hold now and then.
	rel.run(t, n, text, programName(rs.Family, "restore"), "-w", "--noflush")
}

func save(t *testing.T, n ns.NetNS, f iptables.Family) string { return saveBy(t, own, n, f) }

func saveBy(t *testing.T, rel iptablesRelease, n ns.NetNS, f iptables.Family) string {
	t.Helper()
	out := rel.run(t, n, nil, programName(f, "save"))
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// read is each table of the ruleset as the kernel holds it in n.
func read(t *testing.T, n ns.NetNS, rs *iptables.Ruleset) string {
	t.Helper()
	var b strings.Builder
	err := n.Do(func(ns.NetNS) error {
		s, err := open(abiOf(rs.Family))
		if err != nil {
			return err
		}
		defer s.close()
		for _, table := range rs.Tables() {
			kt, err := s.get(table)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s: hooks %#x entry %v end %v, %d entries\n", table, kt.validHooks, kt.hookEntry, kt.hookEnd, kt.num)
			for at := 0; at < len(kt.entries); at += 16 {
				fmt.Fprintf(&b, "%06x % x\n", at, kt.entries[at:min(at+16, len(kt.entries))])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func write(n ns.NetNS, rs *iptables.Ruleset) error {
	return n.Do(func(ns.NetNS) error { return Write(rs, time.Now().Add(10*time.Second)) })
}

// Every parity spec, each family, each release (the machine's, the ones
// test/oldiptables unpacks, and the built ones when their variables name
// them: the x_tables ABI is every release's, and so must be what Write
// writes): the kernel holds the same bytes, and the release's
// iptables-legacy-save prints the same text, as after its
// iptables-legacy-restore of Plan's text.
func TestWritesWhatRestoreWrites(t *testing.T) {
	program(t, iptables.IPv4, "restore")
	t.Run("own", func(t *testing.T) { writesWhatRestoreWrites(t, own) })
	for _, rel := range append(oldiptables.Releases(), oldiptables.Recorded()...) {
		if slices.Contains(oldiptables.Recorded(), rel) && !rel.Named() {
			continue
		}
		t.Run(rel.Version, func(t *testing.T) {
			writesWhatRestoreWrites(t, iptablesRelease{version: rel.Version, command: rel.Find(t, "../../..").Command})
		})
	}
}

func writesWhatRestoreWrites(t *testing.T, rel iptablesRelease) {
	for name, spec := range iptablestest.ParitySpecs() {
		for _, rs := range iptables.Build(spec, true, true).Rulesets() {
			t.Run(name+"/"+rs.Family.String(), func(t *testing.T) {
				byRestore, byWrite := newNS(t), newNS(t)
				restoreBy(t, rel, byRestore, rs)
				if err := write(byWrite, rs); err != nil {
					t.Fatal(err)
				}
				if got, want := read(t, byWrite, rs), read(t, byRestore, rs); got != want {
					t.Errorf("the kernel's tables differ\n%s", lineDiff(got, want))
				}
				if got, want := saveBy(t, rel, byWrite, rs.Family), saveBy(t, rel, byRestore, rs.Family); got != want {
					t.Errorf("iptables-legacy-save prints\n%s", lineDiff(got, want))
				}
				for by, n := range map[string]ns.NetNS{"restore": byRestore, "Write": byWrite} {
					if _, ok := holds(t, n, rs); !ok {
						t.Errorf("Holds is false after %s wrote the ruleset", by)
					}
				}
			})
		}
	}
}

// holds is Holds in n.
func holds(t *testing.T, n ns.NetNS, rs *iptables.Ruleset) (fp [32]byte, ok bool) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) (err error) { fp, ok, err = Holds(rs); return err }); err != nil {
		t.Fatal(err)
	}
	return fp, ok
}

// Holds is true only for a namespace that holds the ruleset and nothing
// else of x_tables', whatever its counters; reading makes no table; the
// fingerprint is the ruleset's, not the namespace's.
func TestHolds(t *testing.T) {
	program(t, iptables.IPv4, "")
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		t.Run(f.String(), func(t *testing.T) {
			rs := iptables.BuildFamily(iptablestest.Specs()["tproxy"], f)
			other := iptables.BuildFamily(iptables.DefaultSpec(), f)
			cmd := programName(f, "")
			empty := newNS(t)
			if _, ok := holds(t, empty, &rs); ok {
				t.Error("Holds in an empty namespace")
			}
			if out := save(t, empty, f); strings.Contains(out, "*") {
				t.Errorf("Holds made tables:\n%s", out)
			}
			written := func() ns.NetNS {
				n := newNS(t)
				if err := write(n, &rs); err != nil {
					t.Fatal(err)
				}
				return n
			}
			n := written()
			fp, ok := holds(t, n, &rs)
			if !ok {
				t.Fatal("Holds is false after Write")
			}
			// Counters move with traffic; the filter table, made and left
			// empty, is fresh.
			if err := n.Do(func(ns.NetNS) error { return connectLoopback() }); err != nil {
				t.Fatal(err)
			}
			own.run(t, n, nil, cmd, "-w", "-t", "filter", "-L", "-n")
			if again, ok := holds(t, n, &rs); !ok || again != fp {
				t.Errorf("Holds after traffic and an empty filter table: %v, the same fingerprint %v", ok, again == fp)
			}
			if _, ok := holds(t, n, &other); ok {
				t.Error("Holds another ruleset")
			}
			if fp2, ok := holds(t, written(), &rs); !ok || fp2 != fp {
				t.Errorf("another namespace holding the ruleset: %v, the same fingerprint %v", ok, fp2 == fp)
			}
			for name, args := range map[string][]string{
				"a rule of ours deleted":      {"-t", "mangle", "-D", "PREROUTING", "1"},
				"a foreign rule in our table": {"-t", "mangle", "-A", "OUTPUT", "-j", "ACCEPT"},
				"a rule in another table":     {"-t", "filter", "-A", "INPUT", "-j", "ACCEPT"},
				"a chain of ours flushed":     {"-t", "mangle", "-F", "ISTIO_TPROXY"},
				"a user chain added":          {"-t", "mangle", "-N", "OTHER"},
				"a policy changed":            {"-t", "mangle", "-P", "FORWARD", "DROP"},
			} {
				n := written()
				own.run(t, n, nil, cmd, append([]string{"-w"}, args...)...)
				if _, ok := holds(t, n, &rs); ok {
					t.Errorf("Holds with %s", name)
				}
			}
		})
	}
}

func TestKernelAtLeast(t *testing.T) {
	for release, want := range map[string]bool{
		"5.1.0": true, "5.10.0-28-amd64": true, "6.18.44-fc-v782": true, "5.1": true,
		"5.0.21": false, "4.19.0-27-amd64": false, "3.10.0-1160.el7.x86_64": false,
		"": false, "5": false, "x.y": false,
	} {
		if got := kernelAtLeast(release, 5, 1); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 1) = %v, want %v", release, got, want)
		}
	}
}

func lineDiff(got, want string) string {
	return iptablestest.LineDiff(got, want, "written", "restored")
}

// A namespace that holds rules already is not fresh: nothing is written.
func TestWriteIntoUsedNamespaceChangesNothing(t *testing.T) {
	n := newNS(t)
	first := iptables.BuildFamily(iptablestest.Specs()["tproxy"], iptables.IPv4)
	if err := write(n, &first); err != nil {
		t.Fatal(err)
	}
	before := save(t, n, iptables.IPv4)
	again := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := write(n, &again); !errors.Is(err, ErrNotFresh) {
		t.Fatalf("second write: got %v, want ErrNotFresh", err)
	}
	if after := save(t, n, iptables.IPv4); after != before {
		t.Errorf("a refused write changed the namespace\n%s", lineDiff(after, before))
	}
}

// A table the kernel refuses after another was replaced puts that one
// back: the family is written whole or not at all.
func TestRefusedTablePutsTheOthersBack(t *testing.T) {
	n := newNS(t)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	// REDIRECT is the nat table's: the kernel refuses it in raw, which
	// sorts after nat.
	rs.Rules = append(rs.Rules, iptables.Rule{Table: iptables.TableRaw, Chain: iptables.Output, Target: iptables.Redirect{ToPort: 15001}})
	err := write(n, &rs)
	if err == nil || errors.Is(err, ErrPartial) || !strings.Contains(err.Error(), "raw table") {
		t.Fatalf("got %v, want the raw table refused and nat put back", err)
	}
	if out := save(t, n, iptables.IPv4); strings.Contains(out, "ISTIO") {
		t.Errorf("a refused write left rules:\n%s", out)
	}
	if err := n.Do(func(ns.NetNS) error {
		s, err := open(abi4)
		if err != nil {
			return err
		}
		defer s.close()
		kt, err := s.get(iptables.TableNat)
		if err != nil {
			return err
		}
		_, err = kt.fresh(abi4)
		return err
	}); err != nil {
		t.Errorf("the nat table after the put back: %v", err)
	}
}

// connectLoopback brings lo up in the calling thread's namespace and
// makes one TCP connection over it, through the OUTPUT hooks.
func connectLoopback() error {
	if err := exec.Command("ip", "link", "set", "lo", "up").Run(); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return err
	}
	return c.Close()
}

// The built-in chains' policy counters survive the write, as they do
// iptables-legacy-restore's commit.
func TestPolicyCountersCarriedOver(t *testing.T) {
	n := newNS(t)
	rs := iptables.BuildFamily(iptablestest.Specs()["tproxy"], iptables.IPv4)
	if err := n.Do(func(ns.NetNS) error {
		// The table made, then a connection through its OUTPUT hook.
		s, err := open(abi4)
		if err != nil {
			return err
		}
		_, err = s.get(iptables.TableMangle)
		s.close()
		if err != nil {
			return err
		}
		return connectLoopback()
	}); err != nil {
		t.Fatal(err)
	}
	policy := func() string {
		table := ""
		for _, l := range strings.Split(save(t, n, iptables.IPv4), "\n") {
			if strings.HasPrefix(l, "*") {
				table = l
			}
			if table == "*mangle" && strings.HasPrefix(l, ":OUTPUT ACCEPT") {
				return l
			}
		}
		return ""
	}
	before := policy()
	if before == "" || strings.HasSuffix(before, "[0:0]") {
		t.Fatalf("mangle OUTPUT policy before the write: %q, want a count", before)
	}
	if err := write(n, &rs); err != nil {
		t.Fatal(err)
	}
	if after := policy(); after != before {
		t.Errorf("mangle OUTPUT policy %q after the write, %q before", after, before)
	}
}

// Rules the kernel's x_tables cannot hold as given are refused before
// anything is written.
func TestUnsupportedWritesNothing(t *testing.T) {
	n := newNS(t)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	rs.Rules = append(rs.Rules, iptables.Rule{Table: iptables.TableNat, Chain: iptables.Output, Target: iptables.Jump{Chain: "ISTIO_UNDECLARED"}})
	if err := write(n, &rs); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
	if out := save(t, n, iptables.IPv4); strings.Contains(out, "ISTIO") {
		t.Errorf("rules written:\n%s", out)
	}
}

// The write takes the xtables lock iptables-legacy takes: held by another,
// it waits, writing nothing; it writes once the lock is let go, and gives
// up, writing nothing, if that is past its wait. iptables-legacy itself
// waits for the lock while a write holds it.
func TestWriteTakesTheXtablesLock(t *testing.T) {
	n := newNS(t)
	path := t.TempDir() + "/xtables.lock"
	t.Setenv("XTABLES_LOCKFILE", path)
	held, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	err = n.Do(func(ns.NetNS) error { return Write(&rs, time.Now().Add(50*time.Millisecond)) })
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("with the lock held: %v, want ErrLocked", err)
	}
	if out := save(t, n, iptables.IPv4); strings.Contains(out, "ISTIO") {
		t.Errorf("rules written without the lock:\n%s", out)
	}

	// Let go once the write has found it held: the write goes in.
	waiting := make(chan struct{})
	var once sync.Once
	polled = func() { once.Do(func() { close(waiting) }) }
	t.Cleanup(func() { polled = func() {} })
	done := make(chan error, 1)
	go func() { done <- n.Do(func(ns.NetNS) error { return Write(&rs, time.Now().Add(time.Minute)) }) }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("the write returned while the lock was held: %v", err)
	}
	if out := save(t, n, iptables.IPv4); strings.Contains(out, "ISTIO") {
		t.Errorf("rules written while the lock was held:\n%s", out)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after the lock was let go: %v", err)
	}

	// The lock is iptables-legacy's: held by the write's lock, iptables
	// waits out its -w and fails (status 4).
	unlock, err := lock(time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cmd := exec.CommandContext(t.Context(), "nsenter", "--net="+n.Path(), program(t, iptables.IPv4, ""), "-w", "1", "-t", "filter", "-A", "INPUT", "-j", "ACCEPT")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 {
		t.Errorf("iptables-legacy with the lock held: %v, %s; want it to wait and fail with status 4", err, out)
	}
}

// Holds against iptables-legacy-save, the read it spares the audit, in a
// namespace holding the default model's IPv4 rules.
func BenchmarkHolds(b *testing.B) {
	n := newNS(b)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := write(n, &rs); err != nil {
		b.Fatal(err)
	}
	save, err := exec.LookPath("iptables-legacy-save")
	if err != nil {
		b.Skip("no iptables-legacy-save")
	}
	iptablestest.BenchReads(b, n, map[string]func() error{
		"Holds": func() error {
			if _, ok, err := Holds(&rs); err != nil || !ok {
				return fmt.Errorf("held %v: %w", ok, err)
			}
			return nil
		},
		"iptables-legacy-save": func() error { return exec.Command(save).Run() }, // #nosec G204 -- the machine's iptables
	})
}
