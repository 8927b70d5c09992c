package xtables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/test/oldiptables"
)

// The node agent audits each pod's rules with its image's iptables-save,
// which is this machine's (the image ships its xtables-*-multi), while
// the plugin wrote them with the node's own iptables-restore, whatever
// release the node runs. These tests write every golden spec with other
// Debian releases' iptables-restore, unpacked by test/oldiptables/fetch.sh,
// and ask Check, the audit's own code, whether the namespace holds the
// model: the audit never repairs rules the node's own release wrote.

// auditRelease is the iptables the agent's image carries: bookworm's.
const auditRelease = "1.8.9"

// unpackedRunner runs an unpacked release's programs (test/oldiptables),
// by the names CommandsFor gives.
type unpackedRunner struct{ p oldiptables.Programs }

func (r unpackedRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd, err := r.p.Command(name, args...)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return run(cmd, name, stdin)
}

// runner is an unpacked release's, found where make put it.
func runner(t *testing.T, rel oldiptables.Release) unpackedRunner {
	t.Helper()
	return unpackedRunner{rel.Find(t, filepath.Join("..", "..", ".."))}
}

func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	return n
}

// requireAuditRelease skips unless this machine runs the agent image's
// iptables (as root, to make namespaces).
func requireAuditRelease(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	v, err := NFTVersion(CommandsFor(release.NFT, iptables.IPv4).Restore)
	if err != nil {
		t.Skipf("no iptables-nft: %v", err)
	}
	if v != auditRelease {
		t.Skipf("this machine's iptables is %s, not the agent image's %s", v, auditRelease)
	}
}

// writeAndCheck writes m into a fresh namespace as the plugin does with
// writer, the node's iptables (a trusted restore per family), and returns
// what Check reports when reader's iptables-save reads it. A namespace per
// write, as a pod's: one reused would hold the last writer's tables.
func writeAndCheck(t *testing.T, m iptables.Model, b release.Backend, writer, reader Runner) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var diffs []string
	err := newNS(t).Do(func(ns.NetNS) error {
		w := &Programmer{Runner: writer, Backend: b}
		for _, rs := range m.Rulesets() {
			if _, err := w.Apply(ctx, rs, Write{Trusted: true}); err != nil {
				return fmt.Errorf("writing: %w", err)
			}
		}
		// As the agent's, less Confirmed: that only skips iptables-save
		// for a state iptables-save itself printed as the model.
		var err error
		diffs, err = (&Programmer{Runner: reader, Backend: b}).Check(ctx, m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return diffs
}

// Every golden spec, both families, both backends: what iptables 1.8.7
// and 1.8.11 write, the audit's 1.8.9 reads as exactly the model.
func TestAuditReadsEveryReleasesRules(t *testing.T) {
	requireAuditRelease(t)
	specs := iptablestest.Specs()
	names := slices.Sorted(maps.Keys(specs))
	for _, rel := range oldiptables.Releases() {
		t.Run("written-by-"+rel.Version, func(t *testing.T) {
			writer := runner(t, rel)
			for _, b := range []release.Backend{release.NFT, release.Legacy} {
				for _, name := range names {
					t.Run(string(b)+"/"+name, func(t *testing.T) {
						if d := writeAndCheck(t, iptables.Build(specs[name], true, true), b, writer, ExecRunner{}); len(d) > 0 {
							t.Errorf("the audit's iptables %s reads %s's rules as other than the model, and would repair them:\n%s",
								auditRelease, rel.Version, strings.Join(d, "\n"))
						}
					})
				}
			}
		})
	}
	// The control: the reader matters. The oldest release, reading what
	// the audit's release writes, drops ports and marks from the rules,
	// so the same Check by it reports differences for every spec.
	t.Run("control/1.8.7-reads-"+auditRelease, func(t *testing.T) {
		oldest := oldiptables.Releases()[0]
		reader := runner(t, oldest)
		dropped := map[string]bool{}
		for _, name := range names {
			d := writeAndCheck(t, iptables.Build(specs[name], true, true), release.NFT, ExecRunner{}, reader)
			if err := misprints(d, dropped); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		t.Logf("%s dropped %v", oldest.Version, slices.Sorted(maps.Keys(dropped)))
		if !dropped["--dport"] || !dropped["--mark"] {
			t.Errorf("%s dropped %v, want --dport and --mark among them", oldest.Version, slices.Sorted(maps.Keys(dropped)))
		}
	})
}

// misprinted is Diff's line for a rule read as other text.
var misprinted = regexp.MustCompile(`^(ipv[46]): \S+ \S+: rule \d+ is (".*"), want (".*")$`)

// misprints checks that diffs are a reader's misprints of both families'
// rules: every rule read (none missing or unexpected), each as its own
// text less some matches; it adds the options dropped to dropped.
func misprints(diffs []string, dropped map[string]bool) error {
	families := map[string]bool{}
	var errs []error
	for _, d := range diffs {
		m := misprinted.FindStringSubmatch(d)
		if m == nil {
			errs = append(errs, fmt.Errorf("not a misprinted rule: %s", d))
			continue
		}
		have, err1 := strconv.Unquote(m[2])
		want, err2 := strconv.Unquote(m[3])
		gone, ok := droppedFrom(strings.Fields(have), strings.Fields(want))
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d, err))
			continue
		}
		if !ok {
			errs = append(errs, fmt.Errorf("not the rule less some matches: %s", d))
			continue
		}
		families[m[1]] = true
		for _, tok := range gone {
			if strings.HasPrefix(tok, "--") {
				dropped[tok] = true
			}
		}
	}
	if !families["ipv4"] || !families["ipv6"] {
		errs = append(errs, fmt.Errorf("misprints in %v, want both families'", slices.Sorted(maps.Keys(families))))
	}
	return errors.Join(errs...)
}

// droppedFrom says whether have is want with some tokens left out, and
// which.
func droppedFrom(have, want []string) ([]string, bool) {
	var gone []string
	i := 0
	for _, w := range want {
		if i < len(have) && have[i] == w {
			i++
		} else {
			gone = append(gone, w)
		}
	}
	return gone, i == len(have) && len(gone) > 0
}

// The audit's repair on a node whose iptables-nft is another release than
// the image's writes the rules as the node's own release does (podnet's
// Reconcile, given the layout the plugin remembered): whatever the
// namespace held, the node's own iptables-save then prints exactly the
// model, and what is not ours stays. On 1.8.7 the image's restore, which
// the repair ran before, leaves rules that release misprints (the
// control at the end).
func TestRepairWritesAsTheNodesRelease(t *testing.T) {
	requireAuditRelease(t)
	specs := iptablestest.Specs()
	names := slices.Sorted(maps.Keys(specs))
	// A rule and a chain not ours, in a table of ours: a repair keeps them.
	const notOurs = "*nat\n:KEEP - [0:0]\n-A KEEP -j RETURN\n-A OUTPUT -d 192.0.2.1/32 -j KEEP\nCOMMIT\n"
	// What the namespace holds before the repair, written by the node's
	// iptables (node) or the image's; other is another spec's model.
	starts := []struct {
		name  string
		write func(ctx context.Context, node Runner, m, other iptables.Model) error
	}{
		{"nothing", func(context.Context, Runner, iptables.Model, iptables.Model) error { return nil }},
		{"the-image-release-wrote-it", func(ctx context.Context, _ Runner, m, _ iptables.Model) error {
			return writeModel(ctx, ExecRunner{}, m)
		}},
		{"another-spec-and-rules-not-ours", func(ctx context.Context, node Runner, _, other iptables.Model) error {
			if _, err := node.Run(ctx, []byte(notOurs), CommandsFor(release.NFT, iptables.IPv4).Restore, "--noflush"); err != nil {
				return err
			}
			return writeModel(ctx, node, other)
		}},
	}
	for _, rel := range oldiptables.Releases() {
		layout, ok := nfnl.LayoutOf(rel.Version)
		if !ok {
			t.Fatalf("no layout of %s", rel.Version)
		}
		node := runner(t, rel)
		for i, name := range names {
			m := iptables.Build(specs[name], true, true)
			other := iptables.Build(specs[names[(i+1)%len(names)]], true, true)
			for _, start := range starts {
				t.Run(rel.Version+"/"+name+"/"+start.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					err := newNS(t).Do(func(ns.NetNS) error {
						if err := start.write(ctx, node, m, other); err != nil {
							return fmt.Errorf("before the repair: %w", err)
						}
						restores := 0
						repair := &Programmer{Runner: runnerFunc(func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
							if strings.HasSuffix(name, "-restore") {
								restores++
							}
							return ExecRunner{}.Run(ctx, stdin, name, args...)
						}), Backend: release.NFT}
						for _, rs := range m.Rulesets() {
							w, err := repair.Apply(ctx, rs, Write{Netlink: map[iptables.Family]nfnl.Layout{rs.Family: layout}, Replace: true})
							if err != nil {
								return fmt.Errorf("repairing: %w", err)
							}
							if !w.Netlink || w.Refused != nil {
								return fmt.Errorf("%s: the replacing write did not go in: %w", rs.Family, w.Refused)
							}
						}
						if restores > 0 {
							return fmt.Errorf("the repair ran the image's iptables-restore %d times, not only %s's layout over netlink", restores, rel.Version)
						}
						byNode := &Programmer{Runner: node, Backend: release.NFT}
						d, err := byNode.Check(ctx, m)
						if err != nil {
							return err
						}
						if len(d) > 0 {
							t.Errorf("iptables %s reads the repaired rules as other than the model:\n%s", rel.Version, strings.Join(d, "\n"))
						}
						if start.name == "another-spec-and-rules-not-ours" {
							return keptNotOurs(ctx, byNode)
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
	// The control: the repair as it was, with the image's restore.
	t.Run("control/1.8.7-reads-a-restore-by-"+auditRelease, func(t *testing.T) {
		oldest := oldiptables.Releases()[0]
		reader := runner(t, oldest)
		d := writeAndCheck(t, iptables.Build(specs["outbound-ports"], true, true), release.NFT, ExecRunner{}, reader)
		if err := misprints(d, map[string]bool{}); err != nil {
			t.Error(err)
		}
	})
}

// writeModel writes both families of m with r's iptables-nft-restore.
func writeModel(ctx context.Context, r Runner, m iptables.Model) error {
	p := &Programmer{Runner: r, Backend: release.NFT}
	for _, rs := range m.Rulesets() {
		if _, err := p.Apply(ctx, rs, Write{Trusted: true}); err != nil {
			return err
		}
	}
	return nil
}

// keptNotOurs checks that the nat table still holds the chain and rule not
// ours that the namespace held before the repair.
func keptNotOurs(ctx context.Context, p *Programmer) error {
	obs, err := p.Read(ctx, iptables.IPv4)
	if err != nil {
		return err
	}
	nat := obs.Tables[iptables.TableNat]
	if nat == nil || !slices.Contains(nat.Rules["KEEP"], "-j RETURN") || !slices.Contains(nat.Rules[iptables.Output], "-d 192.0.2.1/32 -j KEEP") {
		return fmt.Errorf("the repair removed what is not ours: nat holds %+v", nat)
	}
	return nil
}

// runnerFunc is a Runner of a function.
type runnerFunc func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)

func (f runnerFunc) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	return f(ctx, stdin, name, args...)
}
