package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// injectorAway is Istio's default-revision injector webhook as the
// istio-discovery chart writes it, with failurePolicy Ignore and istiod
// not serving: the API server calls it for every pod in a namespace
// labelled istio-injection=enabled, fails, and lets the pod through
// uninjected.
const injectorAway = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: istio-sidecar-injector
  labels:
    istio.io/rev: default
webhooks:
- name: namespace.sidecar-injector.istio.io
  clientConfig:
    url: https://127.0.0.1:1/inject
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["pods"]
  namespaceSelector:
    matchLabels:
      istio-injection: enabled
  objectSelector:
    matchExpressions:
    - key: sidecar.istio.io/inject
      operator: NotIn
      values: ["false"]
  failurePolicy: Ignore
  timeoutSeconds: 2
  sideEffects: None
  admissionReviewVersions: ["v1"]
`

// 12. Pods created while the injector was away (its webhook installed,
// failurePolicy Ignore, istiod not serving) are reported: an Event, the
// gauge, inspect's verdict; a pod opted out is not. With
// MISSED_INJECTION=restart, a Deployment's pods are evicted once, in the
// ReplicaSet's one restart round; its replacements (missing the sidecar
// too: the injector is still away) are only reported; a bare pod is only
// reported.
func TestMissedInjection(t *testing.T) {
	requireInstalled(t)
	const ns = "injected-ns"
	applyManifest(t, injectorAway)
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		_, _ = env.node.Kubectl(context.Background(), "delete", "namespace", ns, "--wait=false")
	})
	kubectl(t, "label", "namespace", ns, "istio-injection=enabled")
	startPod(t, cluster.PodSpec{Namespace: ns, Name: "missed", Target: server(t)})
	startPod(t, cluster.PodSpec{Namespace: ns, Name: "opted-out", Target: server(t), OptedOut: true})
	poll.Until(t, 30*time.Second, "the missed pod's Event", func() (bool, string) {
		out := podEvents(t, ns, "missed")
		return strings.Contains(out, missed.ReasonMissed), out
	})
	if got := metric(t, "istio_cni_missed_injection_pods"); got != 1 {
		t.Errorf("istio_cni_missed_injection_pods = %v, want 1 (the opted-out pod is no miss)", got)
	}
	if out := podEvents(t, ns, "opted-out"); strings.Contains(out, missed.ReasonMissed) {
		t.Errorf("the opted-out pod was reported:\n%s", out)
	}
	out, code := inspectPod(t, ns+"/missed")
	if code != 3 || !strings.Contains(out, "injection: missed injection: webhook namespace.sidecar-injector.istio.io (revision default) selects it") ||
		!strings.Contains(out, "verdict:   NOT IN THE MESH: created without its sidecar") {
		t.Errorf("inspect %s/missed (exit %d, want 3):\n%s", ns, code, out)
	}

	// Restart on: the optional pod writes, then the setting.
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	writes := filepath.Join(base, "optional", "audit-pod-writes.yaml")
	kubectl(t, "apply", "-f", writes)
	if err := setAgentSetting(t.Context(), "MISSED_INJECTION", "restart"); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)
	t.Cleanup(func() {
		if err := setAgentSetting(context.Background(), "MISSED_INJECTION", "report"); err != nil {
			t.Error(err)
		}
		_, _ = env.node.Kubectl(context.Background(), "delete", "-f", writes, "--ignore-not-found")
	})
	startPod(t, cluster.PodSpec{Namespace: ns, Name: "bare", Target: server(t)})
	createDeployment(t, ns, "web", 1, cluster.PodSpec{Namespace: ns, Name: "web", Target: server(t)})
	// The first pod runs for a moment only: the restart Event names it.
	// Two pod starts in a row: beside make test's 100-pod cluster tests,
	// containerd took 51 s to return one sandbox whose CNI ADD took 187 ms.
	var evicted, replacement string
	poll.Until(t, 4*time.Minute, "the Deployment's first pod evicted and replaced", func() (bool, string) {
		names := strings.Fields(kubectl(t, "get", "events", "-n", ns, "--field-selector", "reason="+missed.ReasonRestarted,
			"-o", "jsonpath={.items[*].involvedObject.name}"))
		pods := podsOf(t, ns, "app=web")
		if len(names) != 1 || len(pods) != 1 {
			return false, fmt.Sprintf("restarted %q; pods %q", names, pods)
		}
		evicted, replacement = names[0], pods[0]
		return !strings.HasPrefix(replacement, evicted+" ") && strings.HasSuffix(replacement, " Running"), replacement
	})
	// The replacement missed its injection too (the injector is still
	// away): created after its ReplicaSet's round began, it is only
	// reported, and says so; so is the bare pod.
	replacementName := strings.Fields(replacement)[0]
	poll.Until(t, 2*time.Minute, "the replacement declined", func() (bool, string) {
		out := podEvents(t, ns, replacementName)
		return strings.Contains(out, missed.ReasonNoRestart) && strings.Contains(out, "restart round began"), out
	})
	if pods := podsOf(t, ns, "app=web"); len(pods) != 1 || pods[0] != replacement {
		t.Errorf("the replacement was touched: %q, was %q", pods, replacement)
	}
	if got := metric(t, `istio_cni_missed_injection_restarts_total{result="evicted"}`); got != 1 {
		t.Errorf("evictions counted %v, want 1", got)
	}
	if out := podEvents(t, ns, "bare"); !strings.Contains(out, missed.ReasonMissed) || !strings.Contains(out, "a bare pod") {
		t.Errorf("the bare pod: want reported, not restarted, saying why:\n%s", out)
	}
	if _, found, err := env.node.GetPod(t.Context(), ns, "bare"); err != nil || !found {
		t.Errorf("the bare pod is gone (%v)", err)
	}
	if got := metric(t, "istio_cni_missed_injection_pods"); got != 3 {
		t.Errorf("istio_cni_missed_injection_pods = %v, want 3 (missed, bare, the replacement)", got)
	}
	// The round's Lease is the ReplicaSet's: it goes with it.
	if out := kubectl(t, "get", "leases", "-n", ns, "-o", "jsonpath={.items[*].metadata.ownerReferences[*].kind}"); strings.TrimSpace(out) != "ReplicaSet" {
		t.Errorf("the round's Lease owners %q, want the ReplicaSet", out)
	}
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := env.node.Kubectl(t.Context(), args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func podEvents(t *testing.T, ns, name string) string {
	out, _ := env.node.Kubectl(t.Context(), "get", "events", "-n", ns, "--field-selector", "involvedObject.name="+name,
		"-o", "custom-columns=REASON:.reason,MESSAGE:.message")
	return out
}

// podsOf lists "name uid phase" of the pods matching selector that are not
// being deleted.
func podsOf(t *testing.T, ns, selector string) []string {
	out := kubectl(t, "get", "pods", "-n", ns, "-l", selector, "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}`)
	var pods []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) == 3 {
			pods = append(pods, strings.Join(f, " "))
		}
	}
	return pods
}

// setAgentSetting sets one key of the agent's ConfigMap and restarts the
// agent with it (settings are read at start).
func setAgentSetting(ctx context.Context, key, value string) error {
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{key: value}})
	// Kustomize names the ConfigMap with a hash of its data.
	cm, err := env.node.Kubectl(ctx, "-n", "istio-cni", "get", "daemonset/istio-cni-node", "-o", "jsonpath={.spec.template.spec.containers[0].envFrom[0].configMapRef.name}")
	if err != nil || cm == "" {
		return fmt.Errorf("the agent's ConfigMap: %v (%q)", err, cm)
	}
	for _, args := range [][]string{
		{"-n", "istio-cni", "patch", "configmap", cm, "--type=merge", "-p", string(patch)},
		{"-n", "istio-cni", "rollout", "restart", "daemonset/istio-cni-node"},
		{"-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=3m"},
	} {
		if _, err := env.node.Kubectl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// createDeployment runs pod s as a Deployment of replicas, deleted when
// the test ends.
func createDeployment(t *testing.T, ns, name string, replicas int, s cluster.PodSpec) {
	t.Helper()
	d := s.DeploymentJSON(replicas)
	status, body, err := env.node.Do(t.Context(), http.MethodPost, "/apis/apps/v1/namespaces/"+ns+"/deployments", d)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("creating Deployment %s/%s: %d %v\n%s", ns, name, status, err, body)
	}
	t.Cleanup(func() {
		_, _, _ = env.node.Do(context.Background(), http.MethodDelete, "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, nil)
	})
}

// inspectPod runs install-cni inspect on the node and returns its output
// and exit status.
func inspectPod(t *testing.T, pod string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), env.installCNI, "inspect", "--kubeconfig", env.node.Kubeconfig, "--run-dir", env.node.IstioRunDir,
		"--cni-net-dir", env.node.CNINetDir, "--netns-dir", env.node.NetnsDir, pod) // #nosec G204 -- test binary
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}
