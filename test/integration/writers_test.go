package integration

import (
	"os/exec"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// writer is one way the plugin writes a pod's rules, as its entry says:
// iptables through a backend, or native nftables (native_nftables).
type writer struct {
	name    string
	backend release.Backend // "" for native nftables
}

// writers are every way: the traffic tests run through each.
var writers = []writer{{"legacy", release.Legacy}, {"nft", release.NFT}, {"native", ""}}

func (w writer) native() bool { return w.backend == "" }

// keys are the writer's keys in the plugin's entry.
func (w writer) keys() map[string]any {
	if w.native() {
		return map[string]any{"native_nftables": true}
	}
	return map[string]any{"iptables_backend": string(w.backend)}
}

// assertRules checks a namespace holds exactly the spec's rules as the
// writer writes them.
func assertRules(t *testing.T, path string, w writer, spec iptables.Spec, v6 bool) {
	t.Helper()
	if w.native() {
		rs := nftables.Build(spec, v6)
		if d := nativeDiffs(t, path, &rs); len(d) > 0 {
			t.Errorf("native rules in the pod's namespace differ from the model:\n%v", d)
		}
		return
	}
	for _, rs := range iptables.Build(spec, true, v6).Rulesets() {
		if d := iptables.Diff(rs, readRules(t, path, w.backend, rs.Family)); len(d) > 0 {
			t.Errorf("%s rules in the pod's namespace differ from the model:\n%v", rs.Family, d)
		}
	}
}

// assertNoRules checks a namespace holds nothing of ours: no ISTIO chain
// in either family, and none of our nftables tables.
func assertNoRules(t *testing.T, path string, w writer) {
	t.Helper()
	if d := nativeDiffs(t, path, &nftables.Ruleset{}); len(d) > 0 {
		t.Errorf("the pod's namespace holds native tables of ours: %v", d)
	}
	if w.native() {
		return
	}
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		if obs := readRules(t, path, w.backend, f); !obs.Empty() {
			t.Errorf("%s: the pod's namespace holds ISTIO chains", f)
		}
	}
}

// nativeDiffs is how our tables in the namespace differ from rs, read as
// the plugin reads them.
func nativeDiffs(t *testing.T, path string, rs *nftables.Ruleset) []string {
	t.Helper()
	netns, err := ns.GetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	var d []string
	if err := netns.Do(func(ns.NetNS) (err error) { d, err = nfnl.DiffNative(rs); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

// tamperWith changes what the writer wrote the way a user could: with
// the writer's own tool, an iptables rule (restore) or nftables command
// (nft) as text.
func tamperWith(t *testing.T, path string, w writer, iptablesRules, nftCommands string) {
	t.Helper()
	if w.native() {
		nft, err := exec.LookPath("nft")
		if err != nil {
			t.Fatalf("nft, to tamper with native rules as a user would (make deps installs it): %v", err)
		}
		runIn(t, path, nftCommands, nft, "-f", "-")
		return
	}
	restore, _ := release.LookPath(xtables.CommandsFor(w.backend, iptables.IPv4).Restore)
	runIn(t, path, iptablesRules, restore, "-w", "--noflush")
}

// autoWriter is the plugin's default: iptables as the node's resolves.
var autoWriter = writer{"auto", release.Auto}
