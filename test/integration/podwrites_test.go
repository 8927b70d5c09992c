package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"istio-cni.local/istio-cni/pkg/nodeagent"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// TestPodWritesPolicy: with deployments/optional/audit-pod-writes.yaml
// applied, an agent deletes or labels (with the audit's own calls) only the
// pods on its node, and changes no label but cni.istio.io/uninitialized,
// no annotation and nothing else, whatever the cluster-wide RBAC allows.
func TestPodWritesPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	applyDeployments(t, ctx, "../../deployments/optional/audit-pod-writes.yaml")
	tokenA, _ := agentToken(t, ctx, "pw-node-a")
	agentToken(t, ctx, "pw-node-b")
	admin := clientFor(t, cluster.AdminToken)
	pod := func(name, node string) *corev1.Pod {
		p, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			zero := int64(0)
			_ = admin.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		})
		return p
	}
	onA, onA2, onB := pod("pw-on-a", "pw-node-a"), pod("pw-on-a-2", "pw-node-a"), pod("pw-on-b", "pw-node-b")
	agentA := audit.APIActions{Client: agentClient(t, tokenA)}
	const key = "cni.istio.io/uninitialized"

	// The policy may lag the apply.
	poll.Until(t, 20*time.Second, "another node's pod refused", func() (bool, string) {
		err := agentA.Label(ctx, onB, key, "true")
		return err != nil && strings.Contains(err.Error(), "only pods on the node its pod runs on"), errString(err)
	})
	if err := agentA.Delete(ctx, onB); err == nil || !strings.Contains(err.Error(), "only pods on the node its pod runs on") {
		t.Errorf("deleting another node's pod: %v, want refused", err)
	}
	if err := agentA.Label(ctx, onA, key, "true"); err != nil {
		t.Errorf("labelling its own node's pod: %v", err)
	}
	for _, tc := range []struct{ name, patch string }{
		{"another label", `{"metadata":{"labels":{"app":"payments"}}}`},
		{"a label removed", `{"metadata":{"labels":{"app":null}}}`},
		{"an annotation", `{"metadata":{"annotations":{"sidecar.istio.io/inject":"false"}}}`},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/hold"]}}`},
		{"the spec", `{"spec":{"activeDeadlineSeconds":1}}`},
	} {
		_, err := clientFor(t, tokenA).CoreV1().Pods("default").Patch(ctx, onA.Name, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "may change only a pod's cni.istio.io/uninitialized label") {
			t.Errorf("%s on its own node's pod: %v, want refused", tc.name, err)
		}
	}
	if err := agentA.Delete(ctx, onA2); err != nil {
		t.Errorf("deleting its own node's pod: %v", err)
	}
	got, err := admin.CoreV1().Pods("default").Get(ctx, onA.Name, metav1.GetOptions{})
	if err != nil || got.Labels[key] != "true" || got.Labels["app"] != "web" || len(got.Annotations) != 0 {
		t.Errorf("its own node's pod after all that: %v %v, %v", got.Labels, got.Annotations, err)
	}
}

// TestRestartsPolicy: with restart mode's RBAC (in the same optional
// file), an agent's own restart calls work: a revision's round Lease, the
// cluster's budget and an eviction in a namespace labelled for injection.
// The policy refuses an eviction elsewhere, a Lease of another name, and
// an update of any Lease but the budget.
func TestRestartsPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	applyDeployments(t, ctx, "../../deployments/optional/audit-pod-writes.yaml")
	token, _ := agentToken(t, ctx, "rs-node-a")
	admin := clientFor(t, cluster.AdminToken)
	for name, labels := range map[string]map[string]string{"rs-mesh": {"istio-injection": "enabled"}, "rs-plain": nil} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	yes := true
	pod := func(ns string) *corev1.Pod {
		p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-uid-1", Controller: &yes}}},
			Spec:       corev1.PodSpec{NodeName: "rs-node-a", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	inMesh, inPlain := pod("rs-mesh"), pod("rs-plain")
	r := nodeagent.NewAPIRestarts(agentClient(t, token), "istio-cni", 5)
	rev, _ := missed.RevisionOf(inMesh)
	poll.Until(t, 20*time.Second, "an eviction outside the mesh's namespaces refused", func() (bool, string) {
		err := r.Evict(ctx, inPlain)
		return err != nil && strings.Contains(err.Error(), "only pods in namespaces labelled for Istio's sidecar injection"), errString(err)
	})
	if _, err := r.Round(ctx, inMesh, rev); err != nil {
		t.Errorf("the revision's round: %v", err)
	}
	slot, ok, err := r.Take(ctx)
	if !ok || err != nil {
		t.Errorf("the budget: %v %v", ok, err)
	}
	if err := r.Evict(ctx, inMesh); err != nil {
		t.Errorf("evicting in a namespace labelled for injection: %v", err)
	}
	if err := r.Settle(ctx, slot); err != nil {
		t.Errorf("settling the budget's slot: %v", err)
	}
	agent := clientFor(t, token)
	_, err = agent.CoordinationV1().Leases("rs-mesh").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "some-app-leader"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "only its own restart Leases") {
		t.Errorf("creating another Lease: %v, want refused", err)
	}
	leases, err := agent.CoordinationV1().Leases("rs-mesh").List(ctx, metav1.ListOptions{})
	if err == nil {
		t.Errorf("listing Leases: %d, want no right to", len(leases.Items))
	}
}
