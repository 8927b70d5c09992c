package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"istio-cni.local/istio-cni/cmd/mkimage/image"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// 8. A meshed pod whose rules are removed behind everyone's back (as a
// primary CNI's or an operator's flush would) is found by the node audit
// and repaired in place: same pod, same sandbox, its rules back, an Event
// on the pod and the repair counted.
func TestAuditRepairsInPlace(t *testing.T) {
	requireInstalled(t)
	p := startPod(t, meshedPod(t, "audited"))
	assertRedirected(t, p)
	netns, err := env.node.PodNetNS(t.Context(), "default", "audited")
	if err != nil {
		t.Fatal(err)
	}
	flush := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.Auto}}
	before := metric(t, `istio_cni_audit_actions_total{action="repair",result="success"}`)
	if err := flush.Cleanup(t.Context(), netns); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the audit's repair", func() (bool, string) {
		rules, err := env.node.IptablesSave(t.Context(), "default", "audited")
		return err == nil && strings.Contains(rules, ":ISTIO_OUTPUT "), rules
	})
	after, err := env.node.PodNetNS(t.Context(), "default", "audited")
	if err != nil || after != netns {
		t.Errorf("the pod's sandbox changed (%s -> %s, %v): want the repair in place", netns, after, err)
	}
	// Requests went direct while the rules were gone; the ones after the
	// repair go through the proxy again.
	assertThroughProxyFromNow(t, p)
	if got := metric(t, `istio_cni_audit_actions_total{action="repair",result="success"}`); got < before+1 {
		t.Errorf("repairs counted: %v -> %v", before, got)
	}
	if got := metric(t, "istio_cni_audit_pods_unredirected"); got != 0 {
		t.Errorf("istio_cni_audit_pods_unredirected = %v after the repair", got)
	}
	poll.Until(t, 30*time.Second, "the pod's Events", func() (bool, string) {
		out, _ := env.node.Kubectl(t.Context(), "get", "events", "-n", "default",
			"--field-selector", "involvedObject.name=audited", "-o", "custom-columns=REASON:.reason,SOURCE:.source.component")
		return strings.Contains(out, audit.ReasonMissing) && strings.Contains(out, audit.ReasonRepaired) &&
			strings.Contains(out, nodeagent.Component), out
	})
}

// 8b. Someone allowed to patch pods widens a running meshed pod's
// exclusions (here: every destination), then its rules drift: the audit
// restores the rules ADD applied, not the weakened ones, and the pod gets
// one Event saying its settings changed after it started.
func TestAuditKeepsWhatADDApplied(t *testing.T) {
	requireInstalled(t)
	p := startPod(t, meshedPod(t, "edited"))
	assertRedirected(t, p)
	if _, err := env.node.Kubectl(t.Context(), "-n", "default", "annotate", "pod", "edited", "--overwrite",
		"traffic.sidecar.istio.io/excludeOutboundIPRanges=0.0.0.0/0"); err != nil {
		t.Fatal(err)
	}
	netns, err := env.node.PodNetNS(t.Context(), "default", "edited")
	if err != nil {
		t.Fatal(err)
	}
	flush := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.Auto}}
	if err := flush.Cleanup(t.Context(), netns); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "the audit's repair", func() (bool, string) {
		rules, err := env.node.IptablesSave(t.Context(), "default", "edited")
		return err == nil && strings.Contains(rules, ":ISTIO_OUTPUT "), rules
	})
	// The rules are the default sidecar's, as at ADD: no RETURN for
	// 0.0.0.0/0, and the app's requests after the repair go through the
	// proxy again.
	assertRules(t, "edited")
	assertThroughProxyFromNow(t, p)
	poll.Until(t, 30*time.Second, "the settings-changed Event", func() (bool, string) {
		out, _ := env.node.Kubectl(t.Context(), "get", "events", "-n", "default",
			"--field-selector", "involvedObject.name=edited,reason="+audit.ReasonSettingsChanged, "-o", "custom-columns=COUNT:.count,MESSAGE:.message")
		return strings.Contains(out, "restart the pod to apply") && strings.Contains(out, "OutboundIPExclude"), out
	})
}

// assertThroughProxyFromNow: once a request goes through the proxy (one
// sent while the rules were missing may still be logging), the next two do
// as well, and none goes direct.
func assertThroughProxyFromNow(t *testing.T, p cluster.Pod) {
	t.Helper()
	through := "proxy listener=outbound orig=" + server(t)
	start := len(env.node.ContainerLog(p, "app"))
	var offset int
	poll.Until(t, 30*time.Second, "a request through the proxy", func() (bool, string) {
		log := env.node.ContainerLog(p, "app")
		i := strings.LastIndex(log[start:], through)
		offset = start + i + len(through)
		return i >= 0, log[start:]
	})
	poll.Until(t, 30*time.Second, "two more requests through the proxy", func() (bool, string) {
		log := env.node.ContainerLog(p, "app")[offset:]
		return strings.Count(log, through) >= 2, log
	})
	if log := env.node.ContainerLog(p, "app")[offset:]; strings.Contains(log, "server name=server") {
		t.Errorf("a request bypassed the proxy after the repair:\n%s", log)
	}
}

// 9. The plugin reports each ADD to the agent, whose log shows it.
func TestPluginReportsInAgentLog(t *testing.T) {
	requireInstalled(t)
	startPod(t, meshedPod(t, "reported"))
	agent, ok := installerPodOrEmpty(t)
	if !ok {
		t.Fatal("no agent pod")
	}
	poll.Until(t, 30*time.Second, "the ADD in the agent's log", func() (bool, string) {
		log := env.node.ContainerLog(agent, "install-cni")
		for line := range strings.Lines(log) {
			if strings.Contains(line, `"msg":"plugin ADD"`) && strings.Contains(line, `"pod":"default/reported"`) &&
				strings.Contains(line, `"redirect":true`) {
				return true, line
			}
		}
		return false, log
	})
}

// 10. inspect, run on the node, explains a meshed pod, an unmeshed one,
// the meshed one once its rules are gone (before the audit repairs it),
// and a pod that does not exist.
func TestInspect(t *testing.T) {
	requireInstalled(t)
	startPod(t, meshedPod(t, "inspected"))
	startPod(t, cluster.PodSpec{Namespace: "default", Name: "inspected-plain", Target: server(t)})
	out, code := inspectPod(t, "default/inspected")
	for _, want := range []string{"chains istio-cni", "decision:  redirect (ipv4)", "ipv4 nat -A ISTIO_OUTPUT", "verdict:   ok: redirected"} {
		if !strings.Contains(out, want) || code != 0 {
			t.Errorf("inspect default/inspected (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	t.Logf("inspect default/inspected:\n%s", out)
	out, code = inspectPod(t, "default/inspected-plain")
	if !strings.Contains(out, "not redirected: no istio-proxy container") || code != 0 {
		t.Errorf("inspect default/inspected-plain (exit %d):\n%s", code, out)
	}
	out, code = inspectRulesGone(t, "inspected")
	for _, want := range []string{"decision:  redirect (ipv4), as ADD recorded for this sandbox", "has (istio-cni's rules only):\n  (none)",
		"verdict:   NOT REDIRECTED: ", "differences:\n", "chain missing"} {
		if !strings.Contains(out, want) || code != 3 {
			t.Errorf("inspect default/inspected with its rules gone (exit %d, want 3) lacks %q:\n%s", code, want, out)
		}
	}
	t.Logf("inspect default/inspected, its rules gone:\n%s", out)
	out, code = inspectPod(t, "kube-system/none")
	if code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("inspect of a missing pod (exit %d):\n%s", code, out)
	}
}

// inspectRulesGone removes the meshed pod's rules from its netns, as
// TestAuditRepairsInPlace does, and inspects it before the audit puts them
// back. The audit (a pass every 2 s here, acting after 1 s) may do so
// first: an inspect that finds the rules in place when a repair was
// counted meanwhile is retried, from the flush.
func inspectRulesGone(t *testing.T, name string) (string, int) {
	t.Helper()
	const repairs, attempts = `istio_cni_audit_actions_total{action="repair",result="success"}`, 5
	netns, err := env.node.PodNetNS(t.Context(), "default", name)
	if err != nil {
		t.Fatal(err)
	}
	flush := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.Auto}}
	for range attempts {
		before := metric(t, repairs)
		if err := flush.Cleanup(t.Context(), netns); err != nil {
			t.Fatal(err)
		}
		out, code := inspectPod(t, "default/"+name)
		if code != 0 || metric(t, repairs) == before {
			return out, code // what inspect saw of the pod without its rules
		}
		t.Logf("the audit repaired default/%s before inspect read it; flushing again", name)
	}
	t.Fatalf("the audit repaired default/%s before inspect read it, %d times of %d", name, attempts, attempts)
	return "", 0
}

// TestVersionMatchesImage: the image's version label, what the image's
// own `install-cni version` prints and what the running agent exports are
// one version.
func TestVersionMatchesImage(t *testing.T) {
	img, err := tarball.ImageFromPath(env.image, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	version := cfg.Config.Labels["org.opencontainers.image.version"]
	if version == "" {
		t.Fatalf("the image's labels %v: no org.opencontainers.image.version", cfg.Config.Labels)
	}
	bin := imageFile(t, img, "install-cni")
	out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "install-cni "+version+" (") {
		t.Errorf("the image's install-cni version: %v %q, want its label's %s", err, out, version)
	}
	exported := ""
	for line := range strings.Lines(scrape(t)) {
		if strings.HasPrefix(line, "istio_cni_build_info{") {
			exported = strings.TrimSpace(line)
		}
	}
	if !strings.Contains(exported, `version="`+version+`"`) || !strings.HasSuffix(exported, " 1") {
		t.Errorf("the agent exports %q, want istio_cni_build_info{version=%q} 1", exported, version)
	}
}

// imageFile copies one file of the image's layers out, executable, and
// returns its path.
func imageFile(t *testing.T, img v1.Image, name string) string {
	t.Helper()
	files, err := image.Files(img)
	if err != nil {
		t.Fatal(err)
	}
	if files[name] == nil {
		t.Fatalf("no /%s in the image", name)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(name))
	if err := os.WriteFile(dst, files[name], 0o700); err != nil { // #nosec G306 -- an executable, the test's own
		t.Fatal(err)
	}
	return dst
}

// 11. With the startup taint on the node (as kubelet's
// --register-with-taints puts it there), a new agent removes it once
// ready: its pod-bound token and the admission policy allow exactly that.
func TestStartupTaintRemoved(t *testing.T) {
	requireInstalled(t)
	if _, err := env.node.Kubectl(t.Context(), "taint", "node", env.node.Name, taint.DefaultKey+"=:NoSchedule", "--overwrite"); err != nil {
		t.Fatal(err)
	}
	old := installerPod(t)
	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "delete", "pod", old, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "the new agent removes the taint", func() (bool, string) {
		out, err := env.node.Kubectl(t.Context(), "get", "node", env.node.Name, "-o", "jsonpath={.spec.taints}")
		return err == nil && !strings.Contains(out, taint.DefaultKey), out
	})
	requireInstalled(t)
	if got := metric(t, "istio_cni_node_tainted"); got != 0 {
		t.Errorf("istio_cni_node_tainted = %v", got)
	}
	// Upstream istio-cni's series, which its dashboards and alerts read,
	// are exported beside ours under its names and labels.
	for series, atLeast := range map[string]float64{
		`istio_cni_installs_total{result="SUCCESS"}`:                           1,
		"istio_cni_install_ready":                                              1,
		"istio_cni_install_ready_seconds":                                      0.001, // the new agent's start to ready
		`istio_cni_repair_pods_repaired_total{result="success",type="repair"}`: 0,
		`istio_cni_repair_pods_repaired_total{result="fail",type="repair"}`:    0,
	} {
		if v, found := metricFound(t, series); !found || v < atLeast {
			t.Errorf("%s: %v (exported %v), want at least %v", series, v, found, atLeast)
		}
	}
}

// metric reads one series from the agent's /metrics (0 when absent).
func metric(t *testing.T, series string) float64 {
	t.Helper()
	v, _ := metricFound(t, series)
	return v
}

// scrape is the agent's /metrics text.
func scrape(t *testing.T) string {
	t.Helper()
	text, err := cluster.Scrape(t.Context(), env.agent.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// metricFound reads one series from the agent's /metrics, and whether it
// is there.
func metricFound(t *testing.T, series string) (float64, bool) {
	t.Helper()
	return cluster.Metric(scrape(t), series)
}
