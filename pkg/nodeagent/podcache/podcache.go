// Package podcache is the node agent's one informer over the pods bound to
// its node. The audit checks them, the plugin's pod lookups are answered
// from them (pkg/wire/lookups), and missed injections are found among them
// (pkg/nodeagent/missed): one watch, one cache, for every duty.
package podcache

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// Pods is an informer over the pods bound to one node: the field selector
// keeps the cache (and the API server's work) to this node.
type Pods struct {
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// views hold each pod as the plugin reads it (Lookup), by
	// namespace/name, converted when the informer hears of its version:
	// the lookup on a pod's ADD, which the sandbox's start waits for,
	// usually finds it ready. A view is used only for the version it
	// was made from.
	views map[string]view
}

// view is one version of a pod in pkg/kube's subset.
type view struct {
	uid, version string
	pod          *kube.Pod
}

// New builds the informer. Add handlers with OnChange, then Start it.
// observe, if not nil, is told the outcome of each of the informer's list
// and watch calls (nil when answered): whether the view is being kept
// current. A watch that ends is followed at once by the next call, so a
// lost API server is told within one call.
func New(cs kubeclient.Interface, node string, observe func(error)) (*Pods, error) {
	pods := cs.Pods("")
	if observe != nil {
		pods = observed{PodClient: pods, observe: observe}
	}
	lw := kubeclient.ListWatch(cs, pods, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	// Managed fields are most of a pod's size and no duty reads them.
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	n := &Pods{informer: inf, views: map[string]view{}}
	// The kubelet starts a pod's sandbox, and so its ADD, only after the
	// API bound it to the node: this handler has usually viewed the
	// pod's version by then. Only the handler stores views, in the
	// order it hears of the pod's versions and its deletion: none
	// outlives its pod.
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.heard(obj) },
		UpdateFunc: func(_, obj any) { n.heard(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				n.mu.Lock()
				delete(n.views, key)
				n.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// heard views a version of a pod the informer heard of. A pod without a
// resource version (only a fake API's) is not viewed: its changes cannot
// be told apart.
func (n *Pods) heard(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.ResourceVersion == "" {
		return
	}
	kp, err := apipod.ToKube(p)
	if err != nil {
		return
	}
	n.mu.Lock()
	n.views[p.Namespace+"/"+p.Name] = view{uid: string(p.UID), version: p.ResourceVersion, pod: kp}
	n.mu.Unlock()
}

// view is p in pkg/kube's subset: the view made for its version, or
// converted now (the handler has not reached that version yet).
func (n *Pods) view(p *corev1.Pod) (*kube.Pod, error) {
	n.mu.Lock()
	v, ok := n.views[p.Namespace+"/"+p.Name]
	n.mu.Unlock()
	if ok && p.ResourceVersion != "" && v.uid == string(p.UID) && v.version == p.ResourceVersion {
		return v.pod, nil
	}
	return apipod.ToKube(p)
}

// observed tells each List and Watch call's outcome.
type observed struct {
	kubeclient.PodClient
	observe func(error)
}

func (o observed) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	l, err := o.PodClient.List(ctx, opts)
	o.observe(err)
	return l, err
}

func (o observed) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := o.PodClient.Watch(ctx, opts)
	o.observe(err)
	return w, err
}

// OnChange calls f with each added or updated pod (the cache's object: read
// it, never change it).
func (n *Pods) OnChange(f func(*corev1.Pod)) error {
	_, err := n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				f(p)
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				f(p)
			}
		},
	})
	return err
}

// Start runs the informer until ctx ends and waits for its first list.
func (n *Pods) Start(ctx context.Context) bool {
	go n.informer.RunWithContext(ctx)
	return cache.WaitForCacheSync(ctx.Done(), n.informer.HasSynced)
}

// Synced reports whether the first list is in.
func (n *Pods) Synced() bool { return n.informer.HasSynced() }

// Lookup returns the cached pod namespace/name as the plugin reads pods
// (pkg/wire/lookups answers the plugin's lookups with it): shared with
// every other lookup of that version, so read it, never change it.
func (n *Pods) Lookup(namespace, name string) (*kube.Pod, bool) {
	p, ok := n.Get(namespace, name)
	if !ok {
		return nil, false
	}
	kp, err := n.view(p)
	if err != nil {
		return nil, false
	}
	return kp, true
}

// Get returns the cached pod namespace/name.
func (n *Pods) Get(namespace, name string) (*corev1.Pod, bool) {
	obj, ok, err := n.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// List returns the cached pods.
func (n *Pods) List() []*corev1.Pod {
	objs := n.informer.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods
}
