package nodeagent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
)

// Two agents share one round per owner revision (one Lease, owned by the
// controller so it goes with it) and one budget per minute; an eviction a
// PodDisruptionBudget refuses is ErrDisruptionBudget.
func TestAPIRestarts(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	agent := func() apiRestarts {
		return apiRestarts{cs: clientset.Of(cs), namespace: "istio-cni", perMinute: 2, now: func() time.Time { return now }}
	}
	a, b := agent(), agent()
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "p1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9", UID: "rs-1", Controller: &yes}}}}
	rev, why := missed.RevisionOf(pod)
	if why != "" {
		t.Fatal(why)
	}
	for _, r := range []apiRestarts{a, b} {
		if _, err := r.Round(ctx, pod, rev); err != nil {
			t.Fatal(err)
		}
	}
	leases, err := cs.CoordinationV1().Leases("shop").List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) != 1 {
		t.Fatalf("%v leases (%v), want one round for the revision", len(leases.Items), err)
	}
	if o := leases.Items[0].OwnerReferences; len(o) != 1 || o[0].UID != "rs-1" || o[0].Kind != "ReplicaSet" {
		t.Errorf("the round's owner %+v, want the ReplicaSet", o)
	}
	var took []bool
	for _, r := range []apiRestarts{a, b, a} {
		ok, err := r.Take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, ok)
	}
	if took[0] != true || took[1] != true || took[2] != false {
		t.Errorf("takes %v, want two of the minute's budget of 2, whichever agent", took)
	}
	now = now.Add(time.Minute)
	if ok, err := b.Take(ctx); !ok || err != nil {
		t.Errorf("a minute later: %v %v", ok, err)
	}
	// Another agent updated the budget between our read and write: no
	// eviction taken, a later pass tries again.
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), BudgetLease, errors.New("changed"))
	})
	now = now.Add(time.Minute)
	if ok, err := a.Take(ctx); ok || err != nil {
		t.Errorf("Take on a conflict: %v %v, want false and no error", ok, err)
	}
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "eviction" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		return false, nil, nil
	})
	if err := a.Evict(ctx, pod); !errors.Is(err, missed.ErrDisruptionBudget) {
		t.Errorf("Evict under a PodDisruptionBudget: %v", err)
	}
}

// An agent whose clock runs ahead cannot hold the cluster's budget: its
// entries over a minute in the future do not count.
func TestRecentEvictionsDropsTheFuture(t *testing.T) {
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	got := recentEvictions(strings.Join([]string{at(-2 * time.Minute), at(-30 * time.Second), at(20 * time.Second), at(5 * time.Minute), "junk"}, ","), now)
	if want := []string{at(-30 * time.Second), at(20 * time.Second)}; !slices.Equal(got, want) {
		t.Errorf("recent = %v, want %v", got, want)
	}
}
