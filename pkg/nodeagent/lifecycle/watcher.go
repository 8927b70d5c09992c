package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// Config names the agent's own objects.
type Config struct {
	Namespace      string
	DaemonSet      string
	ServiceAccount string
	// ReplaceWait is how long a deleted DaemonSet may take to reappear
	// before its deletion counts as an uninstall.
	ReplaceWait time.Duration
	// NodeName is the agent's node: whether the DaemonSet still runs a pod
	// there is read from it. "" skips that rule.
	NodeName string
}

// Watcher follows the agent's namespace, DaemonSet and ServiceAccount and
// answers, at shutdown, whether to uninstall (Check).
type Watcher struct {
	cfg    Config
	client kubeclient.Interface
	log    *slog.Logger

	mu  sync.Mutex
	obj map[kind]*object
	// readOK: a read or watch of the DaemonSet succeeded once.
	readOK bool
	// firstDS is the uid of the DaemonSet as first seen: the one that
	// started this agent, unless it was replaced before the watch began.
	firstDS string
	// template is the DaemonSet's pod spec as last seen, for its
	// placement; nil before.
	template *corev1.PodSpec
	// gone is signalled when the DaemonSet or the ServiceAccount is seen
	// deleted (Gone).
	gone chan struct{}
}

type kind string

const (
	namespaceKind      kind = "namespace"
	daemonSetKind      kind = "daemonset"
	serviceAccountKind kind = "serviceaccount"
)

// New returns a watcher; Start begins watching.
func New(cfg Config, client kubeclient.Interface, log *slog.Logger) *Watcher {
	if cfg.ReplaceWait <= 0 {
		cfg.ReplaceWait = DefaultReplaceWait
	}
	return &Watcher{cfg: cfg, client: client, log: log, gone: make(chan struct{}, 1), obj: map[kind]*object{
		namespaceKind: {}, daemonSetKind: {}, serviceAccountKind: {},
	}}
}

// Start watches the three objects until ctx ends. Each watch is one
// object, by name (RBAC grants them by resourceNames). A watch that cannot
// start is logged: shutdown then relies on fresh reads.
func (w *Watcher) Start(ctx context.Context) {
	byName := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	w.watch(ctx, namespaceKind, kubeclient.ListWatch(w.client, w.client.Namespaces(), byName(w.cfg.Namespace)), &corev1.Namespace{})
	w.watch(ctx, daemonSetKind, kubeclient.ListWatch(w.client, w.client.DaemonSets(w.cfg.Namespace), byName(w.cfg.DaemonSet)), &appsv1.DaemonSet{})
	w.watch(ctx, serviceAccountKind, kubeclient.ListWatch(w.client, w.client.ServiceAccounts(w.cfg.Namespace), byName(w.cfg.ServiceAccount)),
		&corev1.ServiceAccount{})
}

// watch runs one object's informer until ctx ends.
func (w *Watcher) watch(ctx context.Context, k kind, lw cache.ListerWatcher, obj runtime.Object) {
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !errors.Is(err, context.Canceled) {
			w.log.Debug("lifecycle watch", "object", string(k), "error", err.Error())
		}
	})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.saw(k, o) },
		UpdateFunc: func(_, o any) { w.saw(k, o) },
		DeleteFunc: func(any) { w.deleted(k) },
	}); err != nil {
		w.log.Warn("lifecycle: cannot watch", "object", string(k), "error", err.Error())
		return
	}
	go inf.RunWithContext(ctx)
}

// saw records an object as a watch or read returned it.
func (w *Watcher) saw(k kind, o any) {
	m, err := meta.Accessor(o)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := *w.obj[k]
	cur := object{known: true, deleting: m.GetDeletionTimestamp() != nil, uid: string(m.GetUID())}
	*w.obj[k] = cur
	if k == daemonSetKind {
		w.readOK = true
		if w.firstDS == "" {
			w.firstDS = cur.uid
		}
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			w.template = &ds.Spec.Template.Spec
		}
	}
	if cur.deleting && !prev.deleting && k != namespaceKind {
		w.signalGone()
	}
	if cur.deleting && !prev.deleting {
		w.log.Info("lifecycle: being deleted", "object", string(k), "name", m.GetName())
	}
}

func (w *Watcher) deleted(k kind) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o := w.obj[k]; !o.gone {
		w.log.Info("lifecycle: deleted", "object", string(k))
	}
	*w.obj[k] = object{known: true, gone: true}
	if k != namespaceKind {
		w.signalGone()
	}
}

func (w *Watcher) signalGone() {
	select {
	case w.gone <- struct{}{}:
	default:
	}
}

// Check is the UninstallCheck: it reads the three objects afresh (what it
// cannot read keeps what the watches saw), decides, and waits for a
// replacement DaemonSet when the old one is gone.
func (w *Watcher) Check(ctx context.Context) (bool, string, error) {
	f := w.refresh(ctx)
	v, why := decide(f, w.cfg.Namespace, w.cfg.DaemonSet, w.cfg.ServiceAccount, w.cfg.NodeName)
	switch v {
	case keep:
		// Present under another uid: deleted and recreated before this
		// check (the watch may not have shown the gap).
		w.mu.Lock()
		first := w.firstDS
		w.mu.Unlock()
		if f.daemonSet.present() && first != "" && f.daemonSet.uid != "" && f.daemonSet.uid != first {
			why = fmt.Sprintf("DaemonSet %s/%s was replaced (uid %s, was %s): a delete and recreate", w.cfg.Namespace, w.cfg.DaemonSet, f.daemonSet.uid, first)
		}
		return false, why, nil
	case remove:
		return true, why, nil
	case awaitServiceAccount:
		removed, why := w.serviceAccountNotBack(ctx, why)
		return removed, why, nil
	case unknown:
		return false, why, fmt.Errorf("cannot tell uninstall from restart: %s", why)
	}
	if uid, ok := w.awaitReplacement(ctx, f.daemonSet.uid); ok {
		return false, fmt.Sprintf("%s and replaced (uid %s): a delete and recreate", why, uid), nil
	}
	return true, fmt.Sprintf("%s and not replaced within %s", why, w.cfg.ReplaceWait), nil
}

// Gone is signalled when the DaemonSet or the ServiceAccount is seen
// deleted: the moment to ask CheckRunning.
func (w *Watcher) Gone() <-chan struct{} { return w.gone }

// CheckRunning reads the objects afresh and says whether istio-cni is gone
// although this agent runs (rules 1 and 2 of the package comment, which no
// restart or update can explain): the agent then uninstalls at once.
func (w *Watcher) CheckRunning(ctx context.Context) (bool, string) {
	v, why, removed := decideRunning(w.refresh(ctx), w.cfg.Namespace, w.cfg.ServiceAccount)
	if v == awaitServiceAccount {
		return w.serviceAccountNotBack(ctx, why)
	}
	return removed, why
}

// Reinstalled says whether istio-cni is back around an agent that
// uninstalled while running: the API accepts the agent again (kubelet
// renewed its token for a recreated ServiceAccount) and shows its
// namespace, DaemonSet and ServiceAccount in place, the DaemonSet placing
// a pod on this node.
func (w *Watcher) Reinstalled(ctx context.Context) (bool, string) {
	f := w.refresh(ctx)
	switch {
	case f.fresh != answered:
		return false, fmt.Sprintf("the API %s", f.fresh)
	case f.namespace.leaving() || !f.daemonSet.present() || !f.serviceAccount.present():
		return false, "not all of the namespace, DaemonSet and ServiceAccount are in place"
	case f.placement == notHere:
		return false, "the DaemonSet does not run on this node: " + f.placementWhy
	}
	return true, fmt.Sprintf("DaemonSet %s/%s (uid %s) and ServiceAccount %s are in place and the API accepts this agent",
		w.cfg.Namespace, w.cfg.DaemonSet, f.daemonSet.uid, w.cfg.ServiceAccount)
}

// serviceAccountNotBack waits up to ReplaceWait for the watch, authorized
// before the refusal, to show a ServiceAccount of the agent's name again;
// removed=true if none came.
func (w *Watcher) serviceAccountNotBack(ctx context.Context, why string) (removed bool, _ string) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ReplaceWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		sa := *w.obj[serviceAccountKind]
		w.mu.Unlock()
		if sa.present() {
			return false, fmt.Sprintf("%s, but it was recreated (uid %s): a delete and recreate; the agent's token is accepted again once kubelet renews it", why, sa.uid)
		}
		select {
		case <-ctx.Done():
			return true, fmt.Sprintf("%s, and it was not recreated within %s", why, w.cfg.ReplaceWait)
		case <-tick.C:
		}
	}
}

// refresh reads the three objects in parallel and merges the answers into
// what the watches saw.
func (w *Watcher) refresh(ctx context.Context) facts {
	ctx, cancel := context.WithTimeout(ctx, freshReadTimeout)
	defer cancel()
	var wg sync.WaitGroup
	outcomes := make([]refusal, 3)
	for i, k := range []kind{namespaceKind, daemonSetKind, serviceAccountKind} {
		wg.Go(func() { outcomes[i] = w.read(ctx, k) })
	}
	var node *corev1.Node
	if w.cfg.NodeName != "" {
		wg.Go(func() {
			if n, err := w.client.Nodes().Get(ctx, w.cfg.NodeName, metav1.GetOptions{}); err == nil {
				node = n
			}
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	f := facts{namespace: *w.obj[namespaceKind], daemonSet: *w.obj[daemonSetKind],
		serviceAccount: *w.obj[serviceAccountKind], readOK: w.readOK}
	if node != nil && w.template != nil {
		f.placement = runsHere
		if ok, why := runsOn(*w.template, node); !ok {
			f.placement, f.placementWhy = notHere, why
		}
	}
	// The DaemonSet's read speaks for the agent's rights; the others only
	// if it got no answer at all.
	f.fresh = outcomes[1]
	for _, o := range outcomes {
		if f.fresh == unreachable && o != unreachable {
			f.fresh = o
		}
	}
	return f
}

// read gets one object and records what it learnt.
func (w *Watcher) read(ctx context.Context, k kind) refusal {
	var o metav1.Object
	var err error
	switch k {
	case namespaceKind:
		o, err = w.client.Namespaces().Get(ctx, w.cfg.Namespace, metav1.GetOptions{})
	case daemonSetKind:
		var ds *appsv1.DaemonSet
		ds, err = w.client.DaemonSets(w.cfg.Namespace).Get(ctx, w.cfg.DaemonSet, metav1.GetOptions{})
		o = ds
	case serviceAccountKind:
		o, err = w.client.ServiceAccounts(w.cfg.Namespace).Get(ctx, w.cfg.ServiceAccount, metav1.GetOptions{})
	}
	switch {
	case err == nil:
		w.saw(k, o)
		return answered
	case apierrors.IsNotFound(err):
		w.deleted(k)
		return answered
	case apierrors.IsUnauthorized(err):
		return unauthorized
	case apierrors.IsForbidden(err):
		return forbidden
	}
	w.log.Warn("lifecycle: reading at shutdown", "object", string(k), "error", err.Error())
	return unreachable
}

// awaitReplacement polls for a DaemonSet of the same name that is not
// being deleted (a new one, or the old one whose deletion was only a
// foreground wait); the watch may see it first. It gives up at once when
// the API refuses the agent: its rights went with the uninstall.
func (w *Watcher) awaitReplacement(ctx context.Context, old string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.ReplaceWait)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		switch w.read(ctx, daemonSetKind) {
		case unauthorized, forbidden:
			return "", false
		}
		w.mu.Lock()
		ds := *w.obj[daemonSetKind]
		w.mu.Unlock()
		if ds.present() {
			if ds.uid == old {
				return ds.uid + ", the same object", true
			}
			return ds.uid, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-tick.C:
		}
	}
}
