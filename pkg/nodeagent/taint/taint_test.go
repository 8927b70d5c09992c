package taint

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
	"istio-cni.local/istio-cni/test/poll"
)

var other = corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoExecute}

func TestWith(t *testing.T) {
	ours := Taint(DefaultKey)
	for _, tc := range []struct {
		name    string
		in      []corev1.Taint
		want    bool
		out     []corev1.Taint
		changed bool
	}{
		{"add to none", nil, true, []corev1.Taint{ours}, true},
		{"add after others", []corev1.Taint{other}, true, []corev1.Taint{other, ours}, true},
		{"already there", []corev1.Taint{other, ours}, true, []corev1.Taint{other, ours}, false},
		{"wrong effect fixed", []corev1.Taint{{Key: DefaultKey, Effect: corev1.TaintEffectNoExecute}}, true, []corev1.Taint{ours}, true},
		{"remove keeps others in order", []corev1.Taint{ours, other}, false, []corev1.Taint{other}, true},
		{"remove duplicates", []corev1.Taint{ours, other, {Key: DefaultKey, Effect: corev1.TaintEffectPreferNoSchedule}}, false, []corev1.Taint{other}, true},
		{"duplicate keys collapse", []corev1.Taint{{Key: DefaultKey, Effect: corev1.TaintEffectNoExecute}, other, ours}, true, []corev1.Taint{other, ours}, true},
		{"remove the last", []corev1.Taint{ours}, false, []corev1.Taint{}, true},
		{"absent", []corev1.Taint{other}, false, []corev1.Taint{other}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]corev1.Taint(nil), tc.in...)
			out, changed := With(in, DefaultKey, tc.want)
			if changed != tc.changed || !reflect.DeepEqual(out, tc.out) {
				t.Errorf("With(%v, %v) = %v, %v; want %v, %v", tc.in, tc.want, out, changed, tc.out, tc.changed)
			}
			if !reflect.DeepEqual(in, tc.in) {
				t.Errorf("the input was modified: %v", in)
			}
		})
	}
}

type readiness struct {
	mu  sync.Mutex
	ok  bool
	why string
	ch  chan struct{}
	// asked is when the controller asked for each why, in order.
	asked []ask
}

type ask struct {
	at  time.Time
	why string
}

func (r *readiness) Ready() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, ask{time.Now(), r.why})
	return r.ok, r.why
}
func (r *readiness) ReadyChanged() <-chan struct{} { return r.ch }
func (r *readiness) set(ok bool, why string) {
	r.mu.Lock()
	r.ok, r.why = ok, why
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// nudge signals a change without one, unless a signal is pending: the
// controller asks Ready again.
func (r *readiness) nudge() {
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// judgedPast reports whether the controller has asked Ready at least d
// after it first saw why, and has finished acting on that answer: it has
// asked again since (Run handles one answer at a time).
func (r *readiness) judgedPast(why string, d time.Duration) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	past := 0
	for _, a := range r.asked {
		switch {
		case first.IsZero() && a.why == why:
			first = a.at
		case !first.IsZero() && a.at.Sub(first) >= d:
			past++
		}
	}
	return past >= 2, fmt.Sprintf("%d asks of %d %v after the first %q", past, len(r.asked), d, why)
}

func taintsOf(t *testing.T, c *fake.Clientset) []corev1.Taint {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Taints
}

func waitTaints(t *testing.T, c *fake.Clientset, want []corev1.Taint) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("taints %v", want), func() (bool, string) {
		got := taintsOf(t, c)
		return len(got) == 0 && len(want) == 0 || reflect.DeepEqual(got, want), fmt.Sprint(got)
	})
}

func TestControllerFollowsReadiness(t *testing.T) {
	c, client, r := runController(t, Controller{Exempt: []string{"shutting down"}}, Taint(DefaultKey), other)

	r.set(true, "")
	waitTaints(t, client, []corev1.Taint{other})

	// Shutting down never taints, however long it lasts: once the
	// controller has judged it past the grace period, the node is as it
	// was. A controller that counted it would have tainted by then.
	r.set(false, "shutting down")
	poll.Until(t, 10*time.Second, "the controller to judge \"shutting down\" past the grace period", func() (bool, string) {
		r.nudge()
		return r.judgedPast("shutting down", c.Grace)
	})
	if got := taintsOf(t, client); !reflect.DeepEqual(got, []corev1.Taint{other}) {
		t.Errorf("shutting down past the grace period: taints %v, want %v", got, []corev1.Taint{other})
	}

	// A failure that outlasts the grace period taints; readiness untaints.
	r.set(false, "conflist: another writer keeps undoing it")
	waitTaints(t, client, []corev1.Taint{other, Taint(DefaultKey)})
	r.set(true, "")
	waitTaints(t, client, []corev1.Taint{other})
}

// TestControllerKey: a configured key (istiod's taint.name) is the one
// removed and put back; the default key, which nodes registered with
// before the key changed, is taken off once ready and never put back, so
// a key change cannot leave a node tainted for good.
func TestControllerKey(t *testing.T) {
	const key = "example.com/cni-not-ready"
	mine, before := Taint(key), Taint(DefaultKey)
	_, client, r := runController(t, Controller{Key: key, Retired: Retired(key)}, mine, other, before)

	r.set(true, "")
	waitTaints(t, client, []corev1.Taint{other})
	r.set(false, "conflist: gone")
	waitTaints(t, client, []corev1.Taint{other, mine})
	if got := Retired(DefaultKey); got != nil {
		t.Errorf("Retired(DefaultKey) = %v, want none", got)
	}
}

// runController runs c (its client, node, readiness, grace and log
// filled in) on a fake node-a carrying taints, until the test ends.
func runController(t *testing.T, c Controller, taints ...corev1.Taint) (*Controller, *fake.Clientset, *readiness) {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "1"},
		Spec:       corev1.NodeSpec{Taints: taints},
	})
	r := &readiness{why: "starting", ch: make(chan struct{}, 1)}
	c.Client, c.Node, c.Ready, c.Grace = clientset.Of(client), "node-a", r, 50*time.Millisecond
	c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &c, client, r
}
