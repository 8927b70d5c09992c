package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// injectorAway is Istio's injector webhook with istiod not serving and
// failurePolicy Ignore: pods in a namespace labelled for injection are
// created without their sidecar.
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
  failurePolicy: Ignore
  timeoutSeconds: 2
  sideEffects: None
  admissionReviewVersions: ["v1"]
`

// restartsPerMinute is the cluster-wide budget the test sets.
const restartsPerMinute = 2

// TestMissedInjectionRestartsBoundedAcrossNodes: with MISSED_INJECTION=
// restart and a budget of 2 evictions a minute, Deployments on every node
// whose pods missed their sidecar (2 pods a node) are restarted at most 2
// a minute across the cluster, all agents together, not 2 a node: the
// first 3 restarts, from at least two nodes' agents, span a minute.
func TestMissedInjectionRestartsBoundedAcrossNodes(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	const ns = "missed-fleet"
	manifest := filepath.Join(t.TempDir(), "injector.yaml")
	if err := os.WriteFile(manifest, []byte(injectorAway), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	writes := filepath.Join(base, "optional", "audit-pod-writes.yaml")
	kubectl(t, "apply", "-f", manifest, "-f", writes)
	kubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		_, _ = env.fleet.Kubectl(ctx, "delete", "namespace", ns, "--wait=false")
		_, _ = env.fleet.Kubectl(ctx, "delete", "-f", manifest, "-f", writes, "--ignore-not-found")
		if err := setMissed(ctx, "report", 5); err != nil {
			t.Error(err)
		}
	})
	kubectl(t, "label", "namespace", ns, "istio-injection=enabled")
	if err := setMissed(t.Context(), "restart", restartsPerMinute); err != nil {
		t.Fatal(err)
	}
	requireAgentsReady(t, env.fleet.Nodes)
	target := serverAddr(t)
	for i, n := range env.fleet.Nodes {
		name := fmt.Sprintf("web-%d", i+1)
		createDeployment(t, ns, name, 2, cluster.PodSpec{Namespace: ns, Name: name, Target: target, NodeName: n.Name})
	}
	var restarts []restartEvent
	poll.Until(t, 4*time.Minute, fmt.Sprintf("%d restarts", restartsPerMinute+1), func() (bool, string) {
		var err error
		if restarts, err = restartEvents(t.Context(), ns); err != nil {
			return false, err.Error()
		}
		return len(restarts) > restartsPerMinute, fmt.Sprint(restarts)
	})
	first := restarts[:restartsPerMinute+1]
	// Whole seconds: a restart a minute later may show 59 s later.
	if span := first[restartsPerMinute].at.Sub(first[0].at); span < 59*time.Second {
		t.Errorf("%d restarts within %v, budget %d a minute across the cluster: %v", len(first), span, restartsPerMinute, first)
	}
	hosts := map[string]bool{}
	for _, r := range restarts {
		hosts[r.host] = true
	}
	if len(hosts) < 2 {
		t.Errorf("restarts from %d node's agent only: %v", len(hosts), restarts)
	}
}

type restartEvent struct {
	at        time.Time
	pod, host string
}

func (r restartEvent) String() string {
	return fmt.Sprintf("%s %s by %s", r.at.Format(time.TimeOnly), r.pod, r.host)
}

// restartEvents lists the agents' restart Events in ns, oldest first.
func restartEvents(ctx context.Context, ns string) ([]restartEvent, error) {
	status, body, err := env.fleet.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/events?fieldSelector=reason%3D"+missed.ReasonRestarted, nil)
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("listing events: %d %s %v", status, body, err)
	}
	var list struct {
		Items []struct {
			FirstTimestamp time.Time
			Source         struct{ Host string }
			InvolvedObject struct{ Name string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	var out []restartEvent
	for _, e := range list.Items {
		out = append(out, restartEvent{at: e.FirstTimestamp, pod: e.InvolvedObject.Name, host: e.Source.Host})
	}
	slices.SortFunc(out, func(a, b restartEvent) int { return a.at.Compare(b.at) })
	return out, nil
}

// setMissed sets MISSED_INJECTION and its budget and restarts the agents
// with them.
func setMissed(ctx context.Context, mode string, perMinute int) error {
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{
		"MISSED_INJECTION": mode, "MISSED_INJECTION_RESTARTS_PER_MINUTE": fmt.Sprint(perMinute)}})
	// Kustomize names the ConfigMap with a hash of its data.
	cm, err := env.fleet.Kubectl(ctx, "-n", "istio-cni", "get", "daemonset/istio-cni-node", "-o", "jsonpath={.spec.template.spec.containers[0].envFrom[0].configMapRef.name}")
	if err != nil || cm == "" {
		return fmt.Errorf("the agent's ConfigMap: %v (%q)", err, cm)
	}
	for _, args := range [][]string{
		{"-n", "istio-cni", "patch", "configmap", cm, "--type=merge", "-p", string(patch)},
		{"-n", "istio-cni", "rollout", "restart", "daemonset/istio-cni-node"},
		{"-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=4m"},
	} {
		if out, err := env.fleet.Kubectl(ctx, args...); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
	}
	return nil
}

// createDeployment runs pod s as a Deployment of replicas (all on s's
// node), deleted when the test ends.
func createDeployment(t *testing.T, ns, name string, replicas int, s cluster.PodSpec) {
	t.Helper()
	d := s.DeploymentJSON(replicas)
	status, body, err := env.fleet.Do(t.Context(), http.MethodPost, "/apis/apps/v1/namespaces/"+ns+"/deployments", d)
	if err != nil || status != http.StatusCreated {
		t.Fatalf("creating Deployment %s/%s: %d %v\n%s", ns, name, status, err, body)
	}
	t.Cleanup(func() {
		_, _, _ = env.fleet.Do(context.Background(), http.MethodDelete, "/apis/apps/v1/namespaces/"+ns+"/deployments/"+name, nil)
	})
}
