package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
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
	nft := nativeOn(t)
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

// nativeOn turns NATIVE_NFTABLES on until the test ends, the agent
// restarted with it, and returns nft, the oracle the tests list a pod's
// tables with.
func nativeOn(t *testing.T) string {
	t.Helper()
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
	return nft
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
// The previous build (be8eded) predates native nftables: it ignores the
// setting, and reads a native sandbox's record as none, so its audit
// (repair) finds the pod without iptables rules and adds them beside the
// native tables, to the same proxy ports; they stay until the pod goes
// (docs/plugin.md). Through both rollouts the native pod's tables never
// change (read every 200 ms) and its traffic goes through its proxy; a
// pod started under the previous build gets its iptables rules at its
// first attempt; plain pods start; back on the current build, after two
// audit passes, both meshed pods still go through their proxies and a
// new pod is native again, at its first attempt.
func TestNativeNftablesAcrossBuilds(t *testing.T) {
	nft := nativeOn(t)
	current, previous := previousImage(t)
	// Before NATIVE_NFTABLES goes off again (cleanups run last first).
	t.Cleanup(func() { restoreBuild(t, current.Ref) })
	want := nftables.Build(iptables.DefaultSpec(), false)
	native := startPod(t, meshedPod(t, "native-across"))
	assertNative(t, nft, native, &want, "")
	netns, err := env.node.PodNetNS(t.Context(), native.Metadata.Namespace, native.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	watch := watchNative(netns, &want)
	t.Cleanup(watch.stop)
	istioRules := func() (int, string) {
		rules, err := env.node.IptablesSave(t.Context(), native.Metadata.Namespace, native.Metadata.Name)
		if err != nil {
			return 0, err.Error()
		}
		return strings.Count(rules, "-A ISTIO_"), rules
	}

	rollImage(t, previous.Ref, 1)
	poll.Until(t, 2*time.Minute, "the previous build's audit to add its iptables rules to the native pod", func() (bool, string) {
		n, rules := istioRules()
		return n > 0, rules
	})
	assertThroughProxyFromNow(t, native)
	old := startPod(t, meshedPod(t, "native-across-prev"))
	assertRedirected(t, old)
	assertFirstSandbox(t, old)
	assertNodeStartsPlainPods(t, "native-across-prev-plain")

	rollImage(t, current.Ref, 2)
	assertThroughProxyFromNow(t, native)
	assertThroughProxyFromNow(t, old)
	again := startPod(t, meshedPod(t, "native-across-again"))
	assertNative(t, nft, again, &want, "")
	assertFirstSandbox(t, again)
	if n, rules := istioRules(); n == 0 {
		t.Errorf("the previous build's iptables rules in the native pod are gone after the upgrade (docs/plugin.md says they stay):\n%s", rules)
	}
	watch.check(t)
}

// nativeWatch reads a pod's native tables every 200 ms until checked.
type nativeWatch struct {
	stop  func()
	mu    sync.Mutex
	reads int
	first string // the first difference or error seen
}

func watchNative(netns string, want *nftables.Ruleset) *nativeWatch {
	w := &nativeWatch{}
	w.stop = poll.Every(200*time.Millisecond, func() {
		var d []string
		err := podnet.Enter(netns, func() (err error) { d, err = nfnl.DiffNative(want); return err })
		w.mu.Lock()
		defer w.mu.Unlock()
		w.reads++
		switch {
		case w.first != "":
		case err != nil:
			w.first = fmt.Sprintf("read %d: %v", w.reads, err)
		case len(d) > 0:
			w.first = fmt.Sprintf("read %d: %v", w.reads, d)
		}
	})
	return w
}

// check stops the watch: the tables never differed from the model.
func (w *nativeWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first != "" {
		t.Errorf("the native pod's tables changed: %s", w.first)
	}
	if w.reads < 10 {
		t.Errorf("the native pod's tables were read %d times: the watch saw nothing", w.reads)
	}
	t.Logf("the native pod's tables read %d times, unchanged: %v", w.reads, w.first == "")
}

// assertFirstSandbox: the pod started at its first sandbox attempt.
func assertFirstSandbox(t *testing.T, p cluster.Pod) {
	t.Helper()
	if err := firstSandbox(t.Context(), p); err != nil {
		t.Error(err)
	}
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
