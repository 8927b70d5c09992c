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
	"istio-cni.local/istio-cni/test/poll"
)

// 20. With NATIVE_NFTABLES=true (the chart's global.nativeNftables), a
// meshed pod's rules are upstream's native nftables ruleset, which the
// agent writes over netlink: nft lists its tables in the pod's namespace,
// iptables-save no ISTIO chain; inspect explains them; the app's requests
// reach the proxy; a table deleted by hand is put back by the audit.
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

	p := startPod(t, meshedPod(t, "native"))
	netns, err := env.node.PodNetNS(t.Context(), p.Metadata.Namespace, p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := nftables.Build(iptables.DefaultSpec(), false)
	listing := func() string {
		out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+netns, nft, "list", "ruleset").CombinedOutput() // #nosec G204 -- test harness
		if err != nil {
			t.Fatalf("nft list ruleset in %s: %v\n%s", netns, err, out)
		}
		return string(out)
	}
	diffs := func() []string {
		var d []string
		if err := podnet.Enter(netns, func() (err error) { d, err = nfnl.DiffNative(&want); return err }); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got := listing(); !strings.Contains(got, "table inet istio-proxy-nat") || !strings.Contains(got, "redirect to :15001") {
		t.Errorf("nft list ruleset in the pod's namespace lacks istio-proxy-nat's redirect:\n%s", got)
	}
	if d := diffs(); len(d) > 0 {
		t.Errorf("the pod's native rules differ from the model: %v\n%s", d, listing())
	}
	if rules, err := env.node.IptablesSave(t.Context(), p.Metadata.Namespace, p.Metadata.Name); err != nil || strings.Contains(rules, "ISTIO_") {
		t.Errorf("iptables-save in a native pod: %v\n%s", err, rules)
	}
	if last, ok := lastADD(p); !ok || last.RulesBy != "nftables" || last.RanIn != "agent" {
		t.Errorf("the ADD of %s: %+v (found %v), want its rules by nftables, run by the agent", p.Metadata.Name, last, ok)
	}
	if out, code := inspectPod(t, p.Metadata.Namespace+"/"+p.Metadata.Name); code != 0 ||
		!strings.Contains(out, "rules:     native nftables") || !strings.Contains(out, "ok: redirected") {
		t.Errorf("inspect (exit %d):\n%s", code, out)
	}
	assertThroughProxy(t, p)

	// Deleted by hand, the table is put back by the agent's audit.
	if out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+netns, nft, "delete", "table", "inet", nftables.TableNat).CombinedOutput(); err != nil { // #nosec G204 -- test harness
		t.Fatalf("nft delete table: %v\n%s", err, out)
	}
	poll.Until(t, 2*time.Minute, "the audit to restore istio-proxy-nat", func() (bool, string) {
		d := diffs()
		return len(d) == 0, strings.Join(d, "; ")
	})
}
