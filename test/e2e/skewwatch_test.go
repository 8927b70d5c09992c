package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// watchedPod is a pod running through the whole change, as first seen.
type watchedPod struct {
	variant skewVariant
	pod     cluster.Pod
	netns   string
	state   netState
}

// skewWatch reads the watched pods' namespaces and API state over and
// over, and keeps what changed.
type skewWatch struct {
	pods   []watchedPod
	events map[string]int // the Istio* Events before: by UID, their count
	stop   func()
	log    []string
	// deletes: AUDIT_ACTION=delete is on.
	deletes bool
	// namespace holds the pods: "" is default.
	namespace string
	// expected are Event reasons the change may record.
	expected []string

	mu       sync.Mutex
	label    string // what is happening now, for the failures
	n        int
	failures []string
	seen     map[string]bool // a failure's first line, once each
}

// startSkewWatch starts one pod of each variant and a plain pod, checks
// each holds its model (the plain pod nothing of ours) and its app's
// requests land where they should, takes their namespaces' state and the
// cluster's Istio* Events, and starts reading them over and over (a
// round at most every 200 ms).
func startSkewWatch(t *testing.T) *skewWatch {
	t.Helper()
	target := server(t)
	variants := append(skewVariants(), skewVariant{name: "plain"})
	for _, v := range variants {
		name := "skew-" + v.name
		if err := env.node.CreatePod(t.Context(), v.podJSON(target, name)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.node.DeletePod(context.Background(), "default", name) })
	}
	w := &skewWatch{events: istioEvents(t), seen: map[string]bool{}, label: "before the change"}
	for _, v := range variants {
		name := "skew-" + v.name
		p := skewPodRunning(t, name)
		model, err := v.model(target, name)
		if err != nil {
			t.Fatal(err)
		}
		netns, err := env.node.PodNetNS(t.Context(), "default", name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := readNetState(t.Context(), netns)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.matchesModel(model); err != nil {
			t.Fatalf("%s before the change: %v", name, err)
		}
		if v.meshed {
			assertThroughProxy(t, p)
		} else {
			assertDirect(t, p)
		}
		w.pods = append(w.pods, watchedPod{variant: v, pod: p, netns: netns, state: st})
	}
	w.stop = poll.Paced(200*time.Millisecond, w.round)
	t.Cleanup(w.stop)
	return w
}

// skewPodRunning waits for the pod to run and returns it.
func skewPodRunning(t *testing.T, name string) cluster.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	p, err := env.node.WaitRunning(ctx, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (w *skewWatch) ns() string {
	if w.namespace == "" {
		return "default"
	}
	return w.namespace
}

func (w *skewWatch) names() string {
	var out []string
	for _, p := range w.pods {
		out = append(out, p.pod.Metadata.Name)
	}
	return strings.Join(out, ", ")
}

func (w *skewWatch) meshed() int {
	n := 0
	for _, p := range w.pods {
		if p.variant.meshed {
			n++
		}
	}
	return n
}

func (w *skewWatch) phase(label string) {
	w.mu.Lock()
	w.label = label
	w.mu.Unlock()
}

func (w *skewWatch) rounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// round reads every watched pod once: its namespace's state against the
// first, and the API's pod against the first (same UID, not deleting, no
// container restarted).
func (w *skewWatch) round() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range w.pods {
		name := p.pod.Metadata.Name
		if st, err := readNetState(ctx, p.netns); err != nil {
			w.fail(name+": its namespace unreadable (its sandbox gone?)", err.Error())
		} else if d := p.state.diff(st); d != "" {
			w.fail(name+": its namespace's rules or routes changed", d)
		}
		now, found, err := env.node.GetPod(ctx, w.ns(), name)
		switch {
		case err != nil:
			w.fail(name+": reading the pod", err.Error())
		case !found || now.Metadata.UID != p.pod.Metadata.UID:
			w.fail(name+": deleted", fmt.Sprintf("found=%v uid %s, was %s", found, now.Metadata.UID, p.pod.Metadata.UID))
		case now.Metadata.DeletionTimestamp != nil:
			w.fail(name+": being deleted", fmt.Sprint(now.Metadata.DeletionTimestamp))
		default:
			for _, c := range now.Status.ContainerStatuses {
				if c.RestartCount != 0 || !c.Ready {
					w.fail(name+": container "+c.Name+" restarted or not ready", fmt.Sprintf("%+v", c))
				}
			}
		}
	}
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}

// fail keeps a failure, the first time it is seen.
func (w *skewWatch) fail(what, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[what] {
		return
	}
	w.seen[what] = true
	w.failures = append(w.failures, fmt.Sprintf("%s (%s, read %d, %s):\n%s", what, w.label, w.n, time.Now().Format("15:04:05.000"), detail))
}

// check fails the test with what the watch saw change, every Istio*
// Event new since it started, and a watched pod whose sandbox is not its
// first.
func (w *skewWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	for _, f := range w.failures {
		t.Error(f)
	}
	w.failures = nil
	w.mu.Unlock()
	for key, count := range istioEvents(t) {
		if count > w.events[key] && !slices.ContainsFunc(w.expected, func(r string) bool { return strings.Contains(key, " "+r+": ") }) {
			t.Errorf("a new Istio Event: %s (count %d, was %d)", key, count, w.events[key])
		}
	}
	for _, p := range w.pods {
		if err := firstSandbox(t.Context(), p.pod); err != nil {
			t.Error(err)
		}
		if netns, err := env.node.PodNetNS(t.Context(), w.ns(), p.pod.Metadata.Name); err != nil || netns != p.netns {
			t.Errorf("%s: its namespace %s, %v; was %s", p.pod.Metadata.Name, netns, err, p.netns)
		}
	}
}

// firstSandbox: the runtime holds one sandbox for the pod, attempt 0.
func firstSandbox(ctx context.Context, p cluster.Pod) error {
	attempts, err := env.node.SandboxAttempts(ctx, p.Metadata.UID)
	if err != nil {
		return err
	}
	if !slices.Equal(attempts, []uint32{0}) {
		return fmt.Errorf("%s: sandbox attempts %v, want one, attempt 0\n%s", p.Metadata.Name, attempts,
			env.node.PodEvents(ctx, p.Metadata.Namespace, p.Metadata.Name))
	}
	return nil
}

// istioEvents are the cluster's Events whose reason begins with Istio,
// each keyed by what it says and its UID, with its count.
func istioEvents(t *testing.T) map[string]int {
	t.Helper()
	status, body, err := env.node.Do(t.Context(), http.MethodGet, "/api/v1/events", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("listing Events: %d %v", status, err)
	}
	var list struct {
		Items []struct {
			Metadata       struct{ UID string }
			Reason         string
			Message        string
			Count          int
			InvolvedObject struct{ Kind, Namespace, Name string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if strings.HasPrefix(e.Reason, "Istio") {
			o := e.InvolvedObject
			out[fmt.Sprintf("%s %s/%s %s: %s [%s]", o.Kind, o.Namespace, o.Name, e.Reason, e.Message, e.Metadata.UID)] = max(e.Count, 1)
		}
	}
	return out
}
