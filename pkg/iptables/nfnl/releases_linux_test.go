package nfnl_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/test/oldiptables"
)

// An iptablesRelease is one release of iptables-nft: its programs, run in
// the calling thread's namespace, and the layout nfnl writes as it.
type iptablesRelease struct {
	version string
	layout  nfnl.Layout
	run     func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// machine runs the machine's own programs, whatever their release.
var machine = iptablesRelease{version: "the machine's", run: xtables.ExecRunner{}.Run}

// ownRelease is the machine's iptables-nft (bookworm's 1.8.9); the test
// skips unless nfnl lays rules out as it writes them.
func ownRelease(t *testing.T) iptablesRelease {
	t.Helper()
	v, err := xtables.NFTVersion(xtables.CommandsFor(release.NFT, iptables.IPv4).Restore)
	if err != nil {
		t.Skipf("no iptables-nft: %v", err)
	}
	l, ok := nfnl.LayoutOf(v)
	if !ok {
		t.Skipf("iptables-nft %s: nfnl lays out no rules as it writes them", v)
	}
	return iptablesRelease{version: v, layout: l, run: xtables.ExecRunner{}.Run}
}

// allReleases are the machine's and the unpacked ones (test/oldiptables):
// every release nfnl lays out but the recorded ones (recorded_linux_test.go),
// which run too when their variables name their programs.
func allReleases(t *testing.T) []iptablesRelease {
	t.Helper()
	rels := []iptablesRelease{ownRelease(t)}
	var recorded []string
	for _, rel := range oldiptables.Recorded() {
		if !rel.Named() {
			recorded = append(recorded, rel.Version)
		}
	}
	for _, rel := range append(oldiptables.Releases(), oldiptables.Recorded()...) {
		if slices.Contains(recorded, rel.Version) {
			continue
		}
		p := rel.Find(t, "../../..")
		l, ok := nfnl.LayoutOf(rel.Version)
		if !ok {
			t.Fatalf("nfnl lays out no rules as iptables %s writes them", rel.Version)
		}
		rels = append(rels, unpacked(rel.Version, l, p))
	}
	var versions []string
	for _, r := range rels {
		versions = append(versions, r.version)
	}
	versions = append(versions, recorded...)
	slices.Sort(versions)
	if laidOut := slices.Sorted(slices.Values(release.Layouts)); !slices.Equal(versions, laidOut) {
		t.Fatalf("releases run or recorded %v, laid out %v: each one laid out must be tested once", versions, laidOut)
	}
	return rels
}

// unpacked is release v, laid out as l, run from its programs p.
func unpacked(v string, l nfnl.Layout, p oldiptables.Programs) iptablesRelease {
	return iptablesRelease{version: v, layout: l, run: func(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
		cmd, err := p.Command(name, args...)
		if err != nil {
			return nil, err
		}
		cmd.Stdin = bytes.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			return out, fmt.Errorf("%s %s: %w: %s", v, name, err, stderr.String())
		}
		return out, nil
	}}
}

// TestEachReleaseReadsTheWritesAsRestores: for every release nfnl lays out
// and a Debian suite serves (the others: TestRecordedReleases),
// every parity spec and family written over netlink in its layout is,
// expression by expression, what that release's iptables-nft-restore
// writes; and every release's iptables-save, its own or another's, prints
// the two writes alike, reading every rule; its own release prints them
// as exactly the model, which is what the node's own tools, and the
// plugin's read-back there, see. (An older release misprints some of a
// newer one's encodings, 1.8.7 printing 1.8.9's "-p tcp --dport 15008"
// as "-p tcp": the same text for both writers is what "alike" means
// across releases.)
func TestEachReleaseReadsTheWritesAsRestores(t *testing.T) {
	rels := allReleases(t)
	for _, w := range rels {
		t.Run("written-as-"+w.version, func(t *testing.T) {
			writtenBothWays(t, w, func(t *testing.T, rs *iptables.Ruleset, byRestore, byNetlink ns.NetNS) {
				want, got := read(t, byRestore, rs.Family, w), read(t, byNetlink, rs.Family, w)
				if got.kernel != want.kernel {
					t.Errorf("kernel dump differs\n%s", lineDiff(got.kernel, want.kernel))
				}
				// So a state confirmed once is known either way it was written.
				if fingerprint(t, byRestore, rs.Family) != fingerprint(t, byNetlink, rs.Family) {
					t.Error("fingerprints differ")
				}
				for _, r := range rels {
					want, got := read(t, byRestore, rs.Family, r).save, read(t, byNetlink, rs.Family, r).save
					if n := strings.Count(want, "\n-A "); n != len(rs.Rules) {
						t.Fatalf("iptables-save %s printed %d of the %d rules:\n%s", r.version, n, len(rs.Rules), want)
					}
					if got != want {
						t.Errorf("iptables-save %s differs\n%s", r.version, lineDiff(got, want))
					}
					if r.version != w.version {
						continue
					}
					obs, err := iptables.ParseSave([]byte(got))
					if err != nil {
						t.Fatal(err)
					}
					if d := iptables.Diff(rs, obs); len(d) > 0 {
						t.Errorf("iptables-save %s prints its own layout as other than the model:\n%s", r.version, strings.Join(d, "\n"))
					}
				}
			})
		})
	}
}
