package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
)

// A DaemonSet deleted and recreated before the shutdown check, whose gap
// the watch never showed, is still told apart from a restart: its uid
// changed. Both keep the files.
func TestCheckNamesAReplacement(t *testing.T) {
	ds := func(uid string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: k8stypes.UID("ds-" + uid)}}
	}
	client := fake.NewClientset(ds("a"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni"}})
	w := New(Config{Namespace: "istio-cni", DaemonSet: "istio-cni-node", ServiceAccount: "istio-cni"}, clientset.Of(client),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.saw(daemonSetKind, ds("a")) // as the watch first shows it
	ctx := context.Background()
	uninstall, why, err := w.Check(ctx)
	if err != nil || uninstall || !strings.Contains(why, "is in place") {
		t.Errorf("a restart: %v %q %v", uninstall, why, err)
	}
	if err := client.AppsV1().DaemonSets("istio-cni").Delete(ctx, "istio-cni-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().DaemonSets("istio-cni").Create(ctx, ds("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uninstall, why, err = w.Check(ctx)
	if err != nil || uninstall || !strings.Contains(why, "was replaced (uid ds-b, was ds-a)") {
		t.Errorf("a delete and recreate: %v %q %v", uninstall, why, err)
	}
}

func newTestWatcher(client *fake.Clientset) *Watcher {
	return New(Config{Namespace: "istio-cni", DaemonSet: "istio-cni-node", ServiceAccount: "istio-cni", NodeName: "node-a"}, clientset.Of(client),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// A nodeSelector change moves the DaemonSet off the node: the controller
// deletes the agent's pod for good, and its shutdown check uninstalls,
// naming why, so the node does not keep a config whose plugin's
// credentials nobody renews.
func TestCheckUninstallsWhenTheDaemonSetNoLongerRunsHere(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: "ds-a"}}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "mesh"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"pool": "mesh"}}}
	client := fake.NewClientset(ds, node, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni"}})
	w := newTestWatcher(client)
	ctx := context.Background()
	if uninstall, why, err := w.Check(ctx); err != nil || uninstall {
		t.Fatalf("the DaemonSet still selects the node: %v %q %v", uninstall, why, err)
	}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "edge"}
	if _, err := client.AppsV1().DaemonSets("istio-cni").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	uninstall, why, err := w.Check(ctx)
	if err != nil || !uninstall || !strings.Contains(why, "no longer runs on node node-a") || !strings.Contains(why, "nodeSelector") {
		t.Errorf("nodeSelector changed: %v %q %v, want an uninstall naming the selector", uninstall, why, err)
	}
}

// The agent's watch last showed the DaemonSet in place, then the
// credentials went (the watch lapsed with them): the ServiceAccount seen
// deleted and the API refusing the agent now mean istio-cni is gone,
// whatever the stale DaemonSet says.
func TestCheckUninstallsWhenRefusedAfterItsServiceAccountWent(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: "ds-a"}}
	client := fake.NewClientset()
	w := newTestWatcher(client)
	w.cfg.ReplaceWait = 200 * time.Millisecond
	w.saw(daemonSetKind, ds)
	w.saw(namespaceKind, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}})
	w.deleted(serviceAccountKind)
	client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("token revoked")
	})
	uninstall, why, err := w.Check(context.Background())
	if err != nil || !uninstall || !strings.Contains(why, "ServiceAccount istio-cni/istio-cni is deleted and the API now refuses the agent") {
		t.Errorf("%v %q %v, want an uninstall", uninstall, why, err)
	}
	if removed, why := w.CheckRunning(context.Background()); !removed {
		t.Errorf("while running: %q, want removed", why)
	}
	select {
	case <-w.Gone():
	default:
		t.Error("the ServiceAccount's deletion was not signalled")
	}
}

// The ServiceAccount deleted and created again (kubectl replace --force,
// Argo CD's Replace): the agent's token is refused until kubelet renews it,
// but the watch, authorized before, shows the new one. Not an uninstall,
// running or at shutdown: that would leave the node without istio-cni
// while its DaemonSet stays, and meshed pods would start unredirected.
func TestServiceAccountRecreatedIsNoUninstall(t *testing.T) {
	client := fake.NewClientset()
	w := newTestWatcher(client)
	w.saw(daemonSetKind, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: "ds-a"}})
	w.saw(namespaceKind, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}})
	w.deleted(serviceAccountKind)
	client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("service account uid changed")
	})
	// The watch's event comes once CheckRunning waits for the
	// ServiceAccount, its fresh reads refused.
	ctx := &deadlineAsks{Context: context.Background(), second: make(chan struct{})}
	checked, recreated := make(chan struct{}), make(chan bool, 1)
	go func() {
		select {
		case <-ctx.second:
			w.saw(serviceAccountKind, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni", UID: "sa-b"}})
			recreated <- true
		case <-checked:
			recreated <- false
		}
	}()
	removed, why := w.CheckRunning(ctx)
	close(checked)
	if !<-recreated {
		t.Fatalf("CheckRunning (removed=%v %q) never began to wait for the ServiceAccount: it derived no second deadline from its context", removed, why)
	}
	if removed || !strings.Contains(why, "recreated (uid sa-b)") {
		t.Errorf("while running: removed=%v %q, want kept, naming the new ServiceAccount", removed, why)
	}
	if uninstall, why, err := w.Check(context.Background()); err != nil || uninstall {
		t.Errorf("at shutdown: uninstall=%v %q %v", uninstall, why, err)
	}
}

// A force-deleted agent pod's token is refused too, with everything in
// place: no uninstall, running or at shutdown.
func TestRefusedWithEverythingInPlaceKeeps(t *testing.T) {
	client := fake.NewClientset()
	w := newTestWatcher(client)
	w.saw(daemonSetKind, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: "ds-a"}})
	w.saw(serviceAccountKind, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni"}})
	client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("pod gone")
	})
	if uninstall, why, _ := w.Check(context.Background()); uninstall {
		t.Errorf("uninstalled: %q", why)
	}
	if removed, why := w.CheckRunning(context.Background()); removed {
		t.Errorf("removed while running: %q", why)
	}
}

// An agent that uninstalled while running asks whether istio-cni is back:
// only when the API accepts it and shows all three objects, the DaemonSet
// placing a pod on this node.
func TestReinstalled(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	w := newTestWatcher(client)
	if back, why := w.Reinstalled(ctx); back {
		t.Errorf("nothing installed: back (%s)", why)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().DaemonSets("istio-cni").Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: "ds-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if back, _ := w.Reinstalled(ctx); back {
		t.Error("back without its ServiceAccount")
	}
	if _, err := client.CoreV1().ServiceAccounts("istio-cni").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if back, why := w.Reinstalled(ctx); !back || !strings.Contains(why, "uid ds-b") {
		t.Errorf("all in place: %v %q", back, why)
	}
	client.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("token of the old ServiceAccount")
	})
	if back, why := w.Reinstalled(ctx); back {
		t.Errorf("the API refuses the agent: back (%s)", why)
	}
}

// deadlineAsks is a context that closes second when asked for its deadline
// the second time. CheckRunning derives a deadline from its context once
// to bound its fresh reads (refresh) and once more, after deciding, to
// bound its wait for the ServiceAccount (serviceAccountNotBack): the
// second ask is the wait beginning, when the watch's event must come to
// be the one the wait sees rather than one the fresh reads merge.
type deadlineAsks struct {
	context.Context
	mu     sync.Mutex
	asks   int
	second chan struct{}
}

func (c *deadlineAsks) Deadline() (time.Time, bool) {
	c.mu.Lock()
	c.asks++
	if c.asks == 2 {
		close(c.second)
	}
	c.mu.Unlock()
	return c.Context.Deadline()
}
