package missed

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

type podList []*corev1.Pod

type gauge struct{ v float64 }

func (g *gauge) Set(v float64) { g.v = v }

type harness struct {
	d        *Detector
	pods     podList
	events   *record.FakeRecorder
	gauge    *gauge
	deleted  []string
	restarts map[string]int
	now      time.Time
}

func newHarness(mode Mode, perMinute int, pods ...*corev1.Pod) *harness {
	h := &harness{pods: pods, events: record.NewFakeRecorder(100), gauge: &gauge{}, restarts: map[string]int{},
		now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	ns := map[string]map[string]string{
		"shop":  {"istio-injection": "enabled"},
		"canar": {"istio.io/rev": "canary"},
		"plain": {},
	}
	h.d = New(Config{Mode: mode, RestartsPerMinute: perMinute, OwnerBackoff: 5 * time.Minute, Excluded: []string{"istio-cni"}}, Deps{
		Pods:            &h.pods,
		NamespaceLabels: func(name string) (map[string]string, bool) { l, ok := ns[name]; return l, ok },
		Delete: func(_ context.Context, p *corev1.Pod) error {
			h.deleted = append(h.deleted, p.Name+"/"+string(p.UID))
			return nil
		},
		Events:   h.events,
		Missed:   h.gauge,
		Restarts: func(r string) { h.restarts[r]++ },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:      func() time.Time { return h.now },
	})
	return h
}

func (l *podList) List() []*corev1.Pod { return *l }

func pod(ns, name string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ownedBy(kind, name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: name, UID: types.UID("uid-" + kind + "-" + name), Controller: &yes}}
	}
}

func (h *harness) drain() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestReportsEachMissedPodOnce(t *testing.T) {
	injected := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy"})
	}
	optedOut := func(p *corev1.Pod) { p.Labels = map[string]string{"sidecar.istio.io/inject": "false"} }
	pending := func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }
	h := newHarness(Report, 5,
		pod("shop", "missed-1"), pod("canar", "missed-2"),
		pod("shop", "injected", injected), pod("shop", "opted-out", optedOut), pod("shop", "not-started", pending),
		pod("plain", "unselected"), pod("unknown-ns", "not-known-yet"), pod("istio-cni", "agent"))
	for range 2 {
		if n := h.d.Pass(context.Background()); n != 2 {
			t.Fatalf("Pass = %d missed, want 2", n)
		}
	}
	events := h.drain()
	if len(events) != 2 {
		t.Fatalf("events %q, want one per missed pod", events)
	}
	for _, e := range events {
		if !strings.HasPrefix(e, "Warning MissedSidecarInjection created without its sidecar: the injector did not mutate it; recreate it to join the mesh") {
			t.Errorf("event %q", e)
		}
	}
	if h.gauge.v != 2 || len(h.deleted) != 0 {
		t.Errorf("gauge %v, deleted %v; want 2 and none in report mode", h.gauge.v, h.deleted)
	}
	// A pod gone and its namesake back: a new pod, a new Event.
	h.pods = podList{pod("shop", "missed-1")}
	h.pods[0].UID = "uid-missed-1-again"
	h.d.Pass(context.Background())
	if ev := h.drain(); len(ev) != 1 || h.gauge.v != 1 {
		t.Errorf("after a recreation: events %q, gauge %v", ev, h.gauge.v)
	}
}

func TestRestartDeletesOnlyControlledPodsWithinBounds(t *testing.T) {
	h := newHarness(Restart, 2,
		pod("shop", "web-1", ownedBy("ReplicaSet", "web")),
		pod("shop", "bare"),
		pod("shop", "custom", ownedBy("Workflow", "wf")),
		pod("shop", "db-0", ownedBy("StatefulSet", "db")),
		pod("shop", "cron-1", ownedBy("Job", "cron")))
	h.d.Pass(context.Background())
	// Two a minute: the ReplicaSet's and the StatefulSet's pods first.
	if want := []string{"web-1/uid-web-1", "db-0/uid-db-0"}; strings.Join(h.deleted, ",") != strings.Join(want, ",") {
		t.Fatalf("deleted %v, want %v", h.deleted, want)
	}
	// The ReplicaSet's replacement missed its injection too: the injector
	// is still away, so it is only reported until the backoff ends.
	h.pods = append(h.pods[1:], pod("shop", "web-2", ownedBy("ReplicaSet", "web")))
	h.now = h.now.Add(time.Minute)
	h.d.Pass(context.Background())
	if want := "web-1/uid-web-1,db-0/uid-db-0,cron-1/uid-cron-1"; strings.Join(h.deleted, ",") != want {
		t.Fatalf("deleted %v, want %v (the Job's pod once the minute passed, the ReplicaSet's replacement not)", h.deleted, want)
	}
	h.now = h.now.Add(5 * time.Minute)
	h.d.Pass(context.Background())
	if last := h.deleted[len(h.deleted)-1]; last != "web-2/uid-web-2" {
		t.Errorf("after the backoff: deleted %v, want web-2 last", h.deleted)
	}
	for _, d := range h.deleted {
		if strings.HasPrefix(d, "bare/") || strings.HasPrefix(d, "custom/") {
			t.Errorf("deleted %s: nothing recreates it", d)
		}
	}
	if h.restarts["deleted"] != len(h.deleted) {
		t.Errorf("restarts counted %v, deleted %d", h.restarts, len(h.deleted))
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"report", "restart", "off"} {
		if _, err := ParseMode(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseMode("delete"); err == nil || !strings.Contains(err.Error(), "report, restart or off") {
		t.Errorf("ParseMode(delete) = %v", err)
	}
}
