package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/nftables"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// 20. With NATIVE_NFTABLES=true (the chart's global.nativeNftables), a
// meshed pod's rules are upstream's native nftables ruleset, written over
// netlink (by the agent, once its audit has read a meshed pod itself): nft
// lists its tables in the pod's namespace, iptables-save no ISTIO chain;
// inspect explains them; the app's requests reach the proxy; a table
// deleted by hand is put back by the audit.
func TestNativeNftables(t *testing.T) {
	requireInstalled(t)
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatalf("nft (the oracle this test lists the pod's tables with; make deps installs it): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := setAgentSetting(ctx, "NATIVE_NFTABLES", "false"); err != nil {
			t.Errorf("turning native nftables off again: %v", err)
		}
	})
	if err := setAgentSetting(t.Context(), "NATIVE_NFTABLES", "true"); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)
	poll.Until(t, time.Minute, "the owned conflist to say native_nftables", func() (bool, string) {
		b, err := os.ReadFile(ownedPath())
		return err == nil && strings.Contains(string(b), `"native_nftables": true`), string(b)
	})
	want := nftables.Build(iptables.DefaultSpec(), false)
	// The first pod's ADD may be the plugin's: the restarted agent takes
	// ADDs once its audit has read a meshed pod's rules itself.
	first := startPod(t, meshedPod(t, "native"))
	assertNative(t, nft, first, &want, "")
	waitAuditPasses(t, 1, 1)
	p := startPod(t, meshedPod(t, "native-again"))
	assertNative(t, nft, p, &want, "agent")
	netns, err := env.node.PodNetNS(t.Context(), p.Metadata.Namespace, p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Deleted by hand, the table is put back by the agent's audit.
	if out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+netns, nft, "delete", "table", "inet", nftables.TableNat).CombinedOutput(); err != nil { // #nosec G204 -- test harness
		t.Fatalf("nft delete table: %v\n%s", err, out)
	}
	poll.Until(t, 2*time.Minute, "the audit to restore istio-proxy-nat", func() (bool, string) {
		d := nativeDiffs(t, netns, &want)
		return len(d) == 0, strings.Join(d, "; ")
	})
}

// assertNative: the pod's namespace holds the native ruleset (as nft
// lists it, and as the plugin reads it back), no ISTIO iptables chain;
// its ADD wrote nftables (run by ranIn, if set); inspect explains it; its
// app's requests reach the proxy.
func assertNative(t *testing.T, nft string, p cluster.Pod, want *nftables.Ruleset, ranIn string) {
	t.Helper()
	netns, err := env.node.PodNetNS(t.Context(), p.Metadata.Namespace, p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+netns, nft, "list", "ruleset").CombinedOutput() // #nosec G204 -- test harness
	if err != nil || !strings.Contains(string(out), "table inet istio-proxy-nat") || !strings.Contains(string(out), "redirect to :15001") {
		t.Errorf("%s: nft list ruleset in its namespace (%v) lacks istio-proxy-nat's redirect:\n%s", p.Metadata.Name, err, out)
	}
	if d := nativeDiffs(t, netns, want); len(d) > 0 {
		t.Errorf("%s: the native rules differ from the model: %v\n%s", p.Metadata.Name, d, out)
	}
	if rules, err := env.node.IptablesSave(t.Context(), p.Metadata.Namespace, p.Metadata.Name); err != nil || strings.Contains(rules, "ISTIO_") {
		t.Errorf("%s: iptables-save in a native pod: %v\n%s", p.Metadata.Name, err, rules)
	}
	if last, ok := lastADD(p); !ok || last.RulesBy != "nftables" || (ranIn != "" && last.RanIn != ranIn) {
		t.Errorf("the ADD of %s: %+v (found %v), want its rules by nftables, run by %q", p.Metadata.Name, last, ok, ranIn)
	}
	if out, code := inspectPod(t, p.Metadata.Namespace+"/"+p.Metadata.Name); code != 0 ||
		!strings.Contains(out, "rules:     native nftables") || !strings.Contains(out, "ok: redirected") {
		t.Errorf("inspect %s (exit %d):\n%s", p.Metadata.Name, code, out)
	}
	assertThroughProxy(t, p)
}

// nativeDiffs is how our tables in the namespace differ from rs, read as
// the plugin reads them.
func nativeDiffs(t *testing.T, netns string, rs *nftables.Ruleset) []string {
	t.Helper()
	var d []string
	if err := podnet.Enter(netns, func() (err error) { d, err = nfnl.DiffNative(rs); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

// 20b. Native nftables across builds: rolled back to the previous build
// and forward again (kubectl set image), NATIVE_NFTABLES=true throughout.
// The previous build predates native nftables: it ignores the setting, and
// reads a native sandbox's record as none, so its audit (repair) finds the
// pod without iptables rules and adds them, beside the native tables, to
// the same proxy ports (logged: how many ISTIO rules the pod holds). Through both rollouts the native pod's tables stay
// as written and its traffic goes through its proxy; the pods started under
// the previous build get its iptables rules at their first attempt; plain
// pods start; and once the current build runs again, every pod is audited
// clean under the writer its record names, and new pods are native again.
func TestNativeNftablesAcrossBuilds(t *testing.T) {
	requireInstalled(t)
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Fatalf("nft (make deps installs it): %v", err)
	}
	current, previous := previousImage(t)
	t.Cleanup(func() {
		restoreBuild(t, current.Ref)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := setAgentSetting(ctx, "NATIVE_NFTABLES", "false"); err != nil {
			t.Errorf("turning native nftables off again: %v", err)
		}
	})
	if err := setAgentSetting(t.Context(), "NATIVE_NFTABLES", "true"); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)
	want := nftables.Build(iptables.DefaultSpec(), false)
	native := startPod(t, meshedPod(t, "native-across"))
	assertNative(t, nft, native, &want, "")
	netns, err := env.node.PodNetNS(t.Context(), native.Metadata.Namespace, native.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	stays := func(when string) {
		t.Helper()
		if d := nativeDiffs(t, netns, &want); len(d) > 0 {
			t.Errorf("%s: the native pod's tables changed: %v", when, d)
		}
		assertThroughProxyFromNow(t, native)
		rules, err := env.node.IptablesSave(t.Context(), native.Metadata.Namespace, native.Metadata.Name)
		t.Logf("%s: the native pod's iptables (%v): %d ISTIO rules", when, err, strings.Count(rules, "-A ISTIO_"))
	}

	rollImage(t, previous.Ref, 1)
	stays("under the previous build")
	old := startPod(t, meshedPod(t, "native-across-prev"))
	assertRedirected(t, old)
	assertNodeStartsPlainPods(t, "native-across-prev-plain")

	rollImage(t, current.Ref, 2)
	stays("back on the current build")
	assertThroughProxyFromNow(t, old)
	assertNative(t, nft, startPod(t, meshedPod(t, "native-across-again")), &want, "")
}

// rollImage rolls the DaemonSet to image and waits for its agent, ready,
// and two full audit passes that checked meshed pods.
func rollImage(t *testing.T, image string, meshed int) {
	t.Helper()
	old := installerPod(t)
	kubectl(t, "-n", "istio-cni", "set", "image", "daemonset/istio-cni-node", "install-cni="+image)
	poll.Until(t, 3*time.Minute, "the agent of "+image, func() (bool, string) {
		p, ok := installerPodOrEmpty(t)
		return ok && p.Metadata.Name != old && allReady(p) && p.Spec.Containers[0].Image == image, agentPodStates(t)
	})
	requireInstalled(t)
	waitAuditPasses(t, 2, meshed)
}
