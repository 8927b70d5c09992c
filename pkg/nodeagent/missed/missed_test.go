package missed

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
)

type podList []*corev1.Pod

type gauge struct{ v float64 }

func (g *gauge) Set(v float64) { g.v = v }

type harness struct {
	d        *Detector
	pods     podList
	events   *record.FakeRecorder
	gauge    *gauge
	restarts *fakeRestarts
	counted  map[string]int
	now      time.Time
	deps     Deps
}

// fakeRestarts is the cluster's shared state, as every agent sees it.
type fakeRestarts struct {
	rounds    map[string]time.Time // by owner UID and hash
	budget    int                  // evictions left this minute
	evicted   []string
	pdbBlocks map[string]bool // pods a PodDisruptionBudget protects now
	now       func() time.Time
	// takes and roundCalls count the calls (API requests, for the real one).
	takes, roundCalls int
	settled           []Slot // after each eviction
}

func (f *fakeRestarts) Round(_ context.Context, _ *corev1.Pod, rev Revision) (time.Time, error) {
	f.roundCalls++
	key := rev.UID + "/" + rev.Hash
	if at, ok := f.rounds[key]; ok {
		return at, nil
	}
	// The Lease's creationTimestamp, as the API serves it: whole seconds.
	f.rounds[key] = f.now().Truncate(time.Second)
	return f.rounds[key], nil
}

func (f *fakeRestarts) Take(context.Context) (Slot, bool, error) {
	f.takes++
	if f.budget == 0 {
		return "", false, nil
	}
	f.budget--
	return Slot("slot-" + strconv.Itoa(f.takes)), true, nil
}

func (f *fakeRestarts) Settle(_ context.Context, s Slot) error {
	f.settled = append(f.settled, s)
	return nil
}

func (f *fakeRestarts) Evict(_ context.Context, p *corev1.Pod) error {
	if f.pdbBlocks[p.Name] {
		return ErrDisruptionBudget
	}
	f.evicted = append(f.evicted, p.Name)
	return nil
}

func newHarness(mode Mode, budget int, pods ...*corev1.Pod) *harness {
	h := &harness{pods: pods, events: record.NewFakeRecorder(100), gauge: &gauge{}, counted: map[string]int{},
		now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	h.restarts = &fakeRestarts{rounds: map[string]time.Time{}, budget: budget, pdbBlocks: map[string]bool{}, now: func() time.Time { return h.now }}
	ns := map[string]map[string]string{
		"shop":  {"istio-injection": "enabled"},
		"canar": {"istio.io/rev": "canary"},
		"plain": {},
	}
	h.deps = Deps{
		Pods:            &h.pods,
		NamespaceLabels: func(name string) (map[string]string, bool) { l, ok := ns[name]; return l, ok },
		Injectors:       func(context.Context) injection.View { return injection.ChartView("test") },
		Restarts:        h.restarts,
		Events:          h.events,
		Missed:          h.gauge,
		Counted:         func(r string) { h.counted[r]++ },
		Log:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:             func() time.Time { return h.now },
	}
	h.d = New(Config{Mode: mode, Excluded: []string{"istio-cni"}}, h.deps)
	return h
}

func (l *podList) List() []*corev1.Pod { return *l }

func pod(ns, name string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC))},
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
		api := map[string]string{"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}[kind]
		if api == "" {
			api = "example.dev/v1"
		}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: api, Kind: kind, Name: name, UID: types.UID("uid-" + kind + "-" + name), Controller: &yes}}
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
	if h.gauge.v != 2 || len(h.restarts.evicted) != 0 {
		t.Errorf("gauge %v, evicted %v; want 2 and none in report mode", h.gauge.v, h.restarts.evicted)
	}
	// A pod gone and its namesake back: a new pod, a new Event.
	h.pods = podList{pod("shop", "missed-1")}
	h.pods[0].UID = "uid-missed-1-again"
	h.d.Pass(context.Background())
	if ev := h.drain(); len(ev) != 1 || h.gauge.v != 1 {
		t.Errorf("after a recreation: events %q, gauge %v", ev, h.gauge.v)
	}
}

// Restart mode: only a ReplicaSet's or a StatefulSet's pod is evicted,
// each pod of a revision's round once, within the cluster's budget; a
// replacement created after the round began is only reported (the injector
// missed it too: no loop); a PodDisruptionBudget's refusal is retried.
func TestRestartIsBoundedAcrossTheCluster(t *testing.T) {
	h := newHarness(Restart, 2,
		pod("shop", "web-1", ownedBy("ReplicaSet", "web")),
		pod("shop", "web-2", ownedBy("ReplicaSet", "web")),
		pod("shop", "bare"),
		pod("shop", "custom", ownedBy("Workflow", "wf")),
		pod("shop", "logs-x", ownedBy("DaemonSet", "logs")),
		pod("shop", "cron-1", ownedBy("Job", "cron")),
		pod("shop", "db-0", ownedBy("StatefulSet", "db")))
	h.restarts.pdbBlocks["db-0"] = true
	h.d.Pass(context.Background())
	if len(h.restarts.evicted) != 0 {
		t.Fatalf("evicted %v in the second the rounds began", h.restarts.evicted)
	}
	h.now = h.now.Add(time.Second) // the rounds' second over
	h.d.Pass(context.Background())
	// Two evictions in the cluster's budget: the ReplicaSet's pods.
	if got := strings.Join(h.restarts.evicted, ","); got != "web-1,web-2" {
		t.Fatalf("evicted %q, want web-1,web-2 within the budget of 2", got)
	}
	// The next minute: the StatefulSet's pod, refused by its budget.
	h.now = h.now.Add(time.Minute)
	h.restarts.budget = 2
	h.d.Pass(context.Background())
	if h.counted["disruption_budget"] != 1 || len(h.restarts.evicted) != 2 {
		t.Fatalf("counted %v, evicted %v: want db-0 refused by its PodDisruptionBudget", h.counted, h.restarts.evicted)
	}
	// The ReplicaSet's replacements missed their injection too: created
	// after its round began, they are only reported, whatever the time.
	h.pods = append(podList{}, h.pods[2:]...)
	for _, name := range []string{"web-3", "web-4"} {
		h.pods = append(h.pods, pod("shop", name, ownedBy("ReplicaSet", "web"), func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(h.now) }))
	}
	delete(h.restarts.pdbBlocks, "db-0")
	for range 3 {
		h.now = h.now.Add(time.Hour)
		h.restarts.budget = 10
		h.d.Pass(context.Background())
	}
	if got := strings.Join(h.restarts.evicted, ","); got != "web-1,web-2,db-0" {
		t.Errorf("evicted %q, want web-1,web-2,db-0: the replacements only reported, the StatefulSet's pod once its budget allowed", got)
	}
	if h.counted["evicted"] != 3 {
		t.Errorf("counted %v", h.counted)
	}
	// Each eviction done, and only those, settles its slot.
	if got := fmt.Sprint(h.restarts.settled); got != "[slot-1 slot-2 slot-5]" {
		t.Errorf("settled %s, want the three evictions' slots (not the try a PodDisruptionBudget refused, slot-4)", got)
	}
	// Each pod not restarted says why, once.
	var declined []string
	for _, e := range h.drain() {
		if strings.Contains(e, ReasonNoRestart) {
			declined = append(declined, e)
		}
	}
	for _, want := range []string{"a bare pod", "a DaemonSet's pod", "a Job's pod", "a Workflow (example.dev/v1), is not one", "created after ReplicaSet shop/web's restart round began"} {
		n := 0
		for _, e := range declined {
			if strings.Contains(e, want) {
				n++
			}
		}
		if want == "created after ReplicaSet shop/web's restart round began" && n != 2 || want != "created after ReplicaSet shop/web's restart round began" && n != 1 {
			t.Errorf("%d events saying %q: %q", n, want, declined)
		}
	}
}

// TestPodStartedInItsRoundsSecondIsRestarted: on a fast node a missed pod
// runs, and its agent begins the round, within the second the pod was
// created; the API serves both times in whole seconds, equal. The pod was
// there before the round (it began it): it is evicted, not declined as a
// replacement, once the round's second is over, so that its replacement
// is created in a later second and only reported.
func TestPodStartedInItsRoundsSecondIsRestarted(t *testing.T) {
	h := newHarness(Restart, 2)
	created := h.now.Add(300 * time.Millisecond)
	h.pods = podList{pod("shop", "web-1", ownedBy("ReplicaSet", "web"), func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(created.Truncate(time.Second))
	})}
	h.now = created.Add(600 * time.Millisecond)
	h.d.Pass(context.Background())
	if len(h.restarts.evicted) != 0 {
		t.Fatalf("evicted %v within the round's own second: its replacement could not be told from it", h.restarts.evicted)
	}
	h.now = h.now.Add(time.Second)
	h.d.Pass(context.Background())
	if got := strings.Join(h.restarts.evicted, ","); got != "web-1" {
		t.Fatalf("evicted %q, want web-1: it began its own round (events %q)", got, h.drain())
	}
	h.now = h.now.Add(time.Second)
	h.pods = podList{pod("shop", "web-2", ownedBy("ReplicaSet", "web"), func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(h.now.Truncate(time.Second))
	})}
	h.d.Pass(context.Background())
	if got := strings.Join(h.restarts.evicted, ","); got != "web-1" {
		t.Errorf("evicted %q, want only web-1: the replacement came after the round began", got)
	}
}

// TestPutOffEvictionIgnoresClockSkew: the wait for the round's second to
// end counts from when this agent read the round, on its own clock: an
// API server ten minutes ahead delays nothing, and one ten minutes behind
// does not let the eviction into the round's second.
func TestPutOffEvictionIgnoresClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		h := newHarness(Restart, 2, pod("shop", "web-1", ownedBy("ReplicaSet", "web")))
		h.pods[0].CreationTimestamp = metav1.NewTime(h.now.Add(skew).Truncate(time.Second))
		h.restarts.now = func() time.Time { return h.now.Add(skew) }
		h.d.Pass(context.Background())
		if len(h.restarts.evicted) != 0 {
			t.Fatalf("skew %v: evicted %v at once, in the round's second", skew, h.restarts.evicted)
		}
		h.now = h.now.Add(time.Second)
		h.d.Pass(context.Background())
		if len(h.restarts.evicted) != 1 {
			t.Errorf("skew %v: evicted %v a second after the round was read, want web-1", skew, h.restarts.evicted)
		}
	}
}

// evictSignal tells when the shared state was asked to evict.
type evictSignal struct {
	*fakeRestarts
	evicted chan string
}

func (e evictSignal) Evict(ctx context.Context, p *corev1.Pod) error {
	err := e.fakeRestarts.Evict(ctx, p)
	e.evicted <- p.Name
	return err
}

// TestPutOffEvictionWakesTheDetector: the eviction put off to the end of
// its round's second is made then, not at the next full pass (an hour
// here); on the real clock.
func TestPutOffEvictionWakesTheDetector(t *testing.T) {
	h := newHarness(Restart, 2, pod("shop", "web-1", ownedBy("ReplicaSet", "web")))
	h.restarts.now = time.Now
	deps := h.deps
	deps.Now = time.Now
	evicted := make(chan string, 1)
	deps.Restarts = evictSignal{h.restarts, evicted}
	d := New(Config{Mode: Restart, Interval: time.Hour}, deps)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case name := <-evicted:
		if name != "web-1" {
			t.Errorf("evicted %s, want web-1", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no eviction within 30 s: the put-off eviction waits for the hourly pass")
	}
}

// A StatefulSet's revisions are its controller-revision-hash: an update
// is a new round. A StatefulSet of another API group is not Kubernetes'
// (its Lease would be collected at once, and the round begin again).
func TestRevisionOf(t *testing.T) {
	sts := pod("shop", "db-0", ownedBy("StatefulSet", "db"), func(p *corev1.Pod) { p.Labels = map[string]string{"controller-revision-hash": "db-7c9"} })
	rev, why := RevisionOf(sts)
	if why != "" || rev.Hash != "db-7c9" || rev.String() != "StatefulSet shop/db at revision db-7c9" {
		t.Errorf("RevisionOf = %+v, %q", rev, why)
	}
	kruise := pod("shop", "db-0", ownedBy("StatefulSet", "db"), func(p *corev1.Pod) { p.OwnerReferences[0].APIVersion = "apps.kruise.io/v1beta1" })
	if _, why := RevisionOf(kruise); !strings.Contains(why, "a StatefulSet (apps.kruise.io/v1beta1), is not one istio-cni restarts") {
		t.Errorf("an OpenKruise StatefulSet's pod: %q", why)
	}
}

// A pod a PodDisruptionBudget holds is tried again after a backoff, not
// on every pass: it cannot drain the cluster's budget.
func TestRefusedEvictionBacksOff(t *testing.T) {
	h := newHarness(Restart, 1000, pod("shop", "db-0", ownedBy("StatefulSet", "db")))
	h.restarts.pdbBlocks["db-0"] = true
	for range 20 { // ten minutes of passes, 30 s apart
		h.d.Pass(context.Background())
		h.now = h.now.Add(30 * time.Second)
	}
	// Tried at 0, 1, 3 and 7 minutes.
	if h.restarts.takes != 4 || h.counted["disruption_budget"] != 4 {
		t.Errorf("%d tries in ten minutes (counted %v), want 4: after 1, 2 then 4 minutes", h.restarts.takes, h.counted)
	}
	delete(h.restarts.pdbBlocks, "db-0")
	h.now = h.now.Add(maxRetry)
	h.d.Pass(context.Background())
	if len(h.restarts.evicted) != 1 {
		t.Errorf("evicted %v once the budget allows, want db-0", h.restarts.evicted)
	}
}

// Where the restart admission policy forbids evictions (a namespace not
// labelled for injection; the pod's own label selected it), the pod is
// reported, not tried; and an owner's round is asked of the API once.
func TestRestartOnlyInNamespacesLabelledForInjection(t *testing.T) {
	selfSelected := func(p *corev1.Pod) { p.Labels = map[string]string{"sidecar.istio.io/inject": "true"} }
	h := newHarness(Restart, 10,
		pod("plain", "api-1", ownedBy("ReplicaSet", "api"), selfSelected),
		pod("shop", "web-1", ownedBy("ReplicaSet", "web")))
	h.restarts.pdbBlocks["web-1"] = true
	h.d.Pass(context.Background()) // begins web's round; its evictions wait for the next second
	h.now = h.now.Add(time.Second)
	for range 3 {
		h.d.Pass(context.Background())
		h.now = h.now.Add(10 * time.Minute)
	}
	if h.gauge.v != 2 {
		t.Fatalf("%v pods missed, want both", h.gauge.v)
	}
	if h.restarts.takes != 3 || h.restarts.roundCalls != 1 {
		t.Errorf("%d takes and %d round reads, want 3 for shop's pod alone and one read of its round", h.restarts.takes, h.restarts.roundCalls)
	}
	n := 0
	for _, e := range h.drain() {
		if strings.Contains(e, ReasonNoRestart) && strings.Contains(e, "its namespace is not labelled for injection") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d Events saying the namespace is not labelled, want 1", n)
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
