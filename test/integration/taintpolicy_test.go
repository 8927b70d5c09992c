package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// agentOn is the agent's identity as the API server sees a token bound to
// its pod on node: the ServiceAccount plus the node-name extra (admin
// impersonation stands for kubelet's projected token).
func agentOn(t *testing.T, node string) kubeclient.Interface {
	t.Helper()
	rc := restConfig(cluster.AdminToken)
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:istio-cni:istio-cni",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:istio-cni", "system:authenticated"},
	}
	if node != "" {
		rc.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	c, err := kubeclient.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeTaintPolicy: deployments/ lets the agent add and remove
// cni.istio.io/not-ready on its own node, with the real taint controller's
// patch, and refuses every other node write its RBAC alone would allow.
func TestNodeTaintPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	applyDeployments(t, ctx)
	adminClient := clientFor(t, cluster.AdminToken)
	other := corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	for _, name := range []string{"taint-node-a", "taint-node-b"} {
		_ = adminClient.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		_, err := adminClient.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "linux"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint.Taint(taint.DefaultKey), other}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = adminClient.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	taints := func(node string) []corev1.Taint {
		n, err := adminClient.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Taints
	}

	// Allowed: the controller removes, then restores, the taint on its own
	// node. The policy may take a moment to load after the apply.
	r := &fixedReadiness{ok: true, ch: make(chan struct{}, 1)}
	c := &taint.Controller{Client: agentOn(t, "taint-node-a"), Node: "taint-node-a", Ready: r, Grace: time.Second,
		Exempt: []string{"shutting down"}, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	poll.UntilTrue(t, 20*time.Second, "the agent removes its node's taint", func() bool {
		// The node controller may add its own not-ready taint meanwhile.
		got := taints("taint-node-a")
		return !slices.ContainsFunc(got, func(t corev1.Taint) bool { return t.Key == taint.DefaultKey }) &&
			slices.ContainsFunc(got, func(t corev1.Taint) bool { return t.MatchTaint(&other) })
	})
	r.set(false, "conflist: gone and cannot be written")
	poll.UntilTrue(t, 20*time.Second, "the agent restores its node's taint", func() bool {
		return slices.ContainsFunc(taints("taint-node-a"), func(t corev1.Taint) bool { return t.Key == taint.DefaultKey })
	})
	stop()
	<-done

	// Refused by the policy (RBAC alone allows every one of them).
	for _, tc := range []struct {
		name, node, asNode, patch string
	}{
		{"another node's taint", "taint-node-b", "taint-node-a", `{"spec":{"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"}]}}`},
		{"a token not bound to a node", "taint-node-a", "", `{"spec":{"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"}]}}`},
		{"another taint on its own node", "taint-node-a", "taint-node-a", `{"spec":{"taints":[{"key":"cni.istio.io/not-ready","effect":"NoSchedule"}]}}`},
		{"a NoExecute not-ready taint", "taint-node-a", "taint-node-a", `{"spec":{"taints":[{"key":"example.com/dedicated","value":"db","effect":"NoSchedule"},{"key":"cni.istio.io/not-ready","effect":"NoExecute"}]}}`},
		{"a label", "taint-node-a", "taint-node-a", `{"metadata":{"labels":{"kubernetes.io/os":"windows"}}}`},
		{"an annotation", "taint-node-a", "taint-node-a", `{"metadata":{"annotations":{"x":"y"}}}`},
		{"cordon", "taint-node-a", "taint-node-a", `{"spec":{"unschedulable":true}}`},
		{"an owner reference", "taint-node-a", "taint-node-a", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6f0a4c2e-1b7d-4e8e-9a51-2c3d4e5f6a7b"}]}}`},
		{"a finalizer", "taint-node-a", "taint-node-a", `{"metadata":{"finalizers":["example.com/block"]}}`},
		{"a pod CIDR", "taint-node-a", "taint-node-a", `{"spec":{"podCIDR":"10.200.0.0/24","podCIDRs":["10.200.0.0/24"]}}`},
	} {
		_, err := agentOn(t, tc.asNode).Nodes().Patch(ctx, tc.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "istio-cni-node-taint") {
			t.Errorf("%s: %v, want the policy to refuse it", tc.name, err)
		}
	}
	// And nothing else changed.
	n, err := adminClient.CoreV1().Nodes().Get(ctx, "taint-node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(n.Spec.Taints)
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.DefaultKey }) || n.Labels["kubernetes.io/os"] != "linux" {
		t.Errorf("taint-node-b changed: %s", got)
	}
}

type fixedReadiness struct {
	mu  sync.Mutex
	ok  bool
	why string
	ch  chan struct{}
}

func (r *fixedReadiness) Ready() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.why
}

func (r *fixedReadiness) ReadyChanged() <-chan struct{} { return r.ch }

func (r *fixedReadiness) set(ok bool, why string) {
	r.mu.Lock()
	r.ok, r.why = ok, why
	r.mu.Unlock()
	r.ch <- struct{}{}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestNodeTaintPolicyNewKey: with the chart's taint.name set to another
// key, the agent (the real controller) removes and restores that key on
// its node, and takes off the default key the node registered with before
// the change, which the policy lets it remove but never add again: a key
// change leaves no node tainted for good.
func TestNodeTaintPolicyNewKey(t *testing.T) {
	const key = "example.com/cni-not-ready"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	helm, err := cluster.Helm()
	if err != nil {
		t.Fatal(err)
	}
	policy, err := exec.CommandContext(ctx, helm, "template", "istio-cni", "../../deployments/helm/istio-cni", "--namespace", "istio-cni",
		"--kube-version", "1.33.0", "--set", "taint.name="+key, "-s", "templates/admission-policy.yaml").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	f := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(f, policy, 0o600); err != nil {
		t.Fatal(err)
	}
	applyDeployments(t, ctx, f)
	adminClient := clientFor(t, cluster.AdminToken)
	other := corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	const node = "taint-node-c"
	_ = adminClient.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if _, err := adminClient.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/os": "linux"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{taint.Taint(taint.DefaultKey), other}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adminClient.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	has := func(k string) bool {
		n, err := adminClient.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == k })
	}

	r := &fixedReadiness{ok: true, ch: make(chan struct{}, 1)}
	c := &taint.Controller{Client: agentOn(t, node), Node: node, Key: key, Retired: taint.Retired(key), Ready: r, Grace: time.Second,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { c.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	poll.UntilTrue(t, 20*time.Second, "the agent removes the default key its node registered with", func() bool {
		return !has(taint.DefaultKey) && !has(key) && has(other.Key)
	})
	r.set(false, "conflist: gone and cannot be written")
	poll.UntilTrue(t, 20*time.Second, "the agent puts its own key back", func() bool { return has(key) })
	if has(taint.DefaultKey) {
		t.Error("the agent put the default key back")
	}
	stop()
	<-done
	// Every other taint as it is (the node controller adds its own).
	patch := `[{"op":"add","path":"/spec/taints/-","value":{"key":"cni.istio.io/not-ready","effect":"NoSchedule"}}]`
	if _, err := agentOn(t, node).Nodes().Patch(ctx, node, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "may only remove cni.istio.io/not-ready") {
		t.Errorf("the agent adding the default key back: %v, want the policy to refuse it", err)
	}
}
