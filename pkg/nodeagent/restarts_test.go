package nodeagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
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
	var slots []missed.Slot
	for _, r := range []apiRestarts{a, b, a} {
		slot, ok, err := r.Take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		took = append(took, ok)
		if ok {
			slots = append(slots, slot)
		}
	}
	if took[0] != true || took[1] != true || took[2] != false {
		t.Errorf("takes %v, want two of the minute's budget of 2, whichever agent", took)
	}
	// Not yet settled, a slot holds its place beyond the minute: until
	// its eviction's deadline has passed a minute.
	now = now.Add(time.Minute)
	if _, ok, err := b.Take(ctx); ok || err != nil {
		t.Errorf("a minute after two unsettled slots: %v %v, want none left", ok, err)
	}
	for _, s := range slots {
		if err := a.Settle(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute)
	if _, ok, err := b.Take(ctx); !ok || err != nil {
		t.Errorf("a minute later: %v %v", ok, err)
	}
	// Another agent updated the budget between our read and write: no
	// eviction taken, a later pass tries again.
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), BudgetLease, errors.New("changed"))
	})
	now = now.Add(time.Minute)
	if _, ok, err := a.Take(ctx); ok || err != nil {
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

// An eviction counts against the cluster's budget from when it was done,
// not from when its slot was taken: an API server slow to answer (20 s
// here) must not let the next agent evict within the minute after it.
func TestBudgetCountsFromTheEviction(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "eviction" {
			now = now.Add(20 * time.Second)
			return true, nil, nil
		}
		return false, nil, nil
	})
	yes := true
	agent := func(name string) (*missed.Detector, *record.FakeRecorder) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: types.UID("rs-" + name), Controller: &yes}}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		events := record.NewFakeRecorder(10)
		return missed.New(missed.Config{Mode: missed.Restart}, missed.Deps{
			Pods:            podsOf{p},
			NamespaceLabels: func(string) (map[string]string, bool) { return map[string]string{"istio-injection": "enabled"}, true },
			Injectors:       func(context.Context) injection.View { return injection.ChartView("test") },
			Restarts:        apiRestarts{cs: clientset.Of(cs), namespace: "istio-cni", perMinute: 1, now: clock},
			Events:          events,
			Missed:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}),
			Counted:         func(string) {},
			Log:             slog.New(slog.NewTextHandler(io.Discard, nil)),
			Now:             clock,
		}), events
	}
	a, aEvents := agent("web-a")
	b, bEvents := agent("web-b")
	restarted := func(ev *record.FakeRecorder) bool {
		for {
			select {
			case e := <-ev.Events:
				if strings.Contains(e, missed.ReasonRestarted) {
					return true
				}
			default:
				return false
			}
		}
	}
	a.Pass(ctx)
	now = now.Add(time.Second) // the round's second over
	a.Pass(ctx)                // takes the minute's one eviction; done 20 s later
	if !restarted(aEvents) {
		t.Fatal("agent a did not evict its pod")
	}
	done := now
	b.Pass(ctx)
	now = done.Add(41 * time.Second) // 61 s after a's slot was taken, 41 s after its eviction
	b.Pass(ctx)
	if restarted(bEvents) {
		t.Fatalf("agent b evicted 41 s after agent a's eviction, budget 1 a minute")
	}
	now = done.Add(time.Minute)
	b.Pass(ctx)
	if !restarted(bEvents) {
		t.Errorf("agent b did not evict a minute after agent a's eviction")
	}
}

type podsOf []*corev1.Pod

func (p podsOf) List() []*corev1.Pod { return p }
