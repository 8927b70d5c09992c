package audit

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodePods is an informer over the pods bound to one node: the field
// selector keeps the cache (and the API server's work) to this node.
type NodePods struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
}

// NewNodePods builds the informer; onChange is called with the UID of each
// added or updated pod. Start it with Start.
func NewNodePods(cs kubernetes.Interface, node string, onChange func(uid string)) (*NodePods, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	// Managed fields are most of a pod's size and the audit never reads
	// them.
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			p.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				onChange(string(p.UID))
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				onChange(string(p.UID))
			}
		},
	}); err != nil {
		return nil, err
	}
	return &NodePods{informer: inf, factory: factory}, nil
}

// Start runs the informer until ctx ends and waits for its first list.
func (n *NodePods) Start(ctx context.Context) bool {
	n.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), n.informer.HasSynced)
}

// List returns the cached pods.
func (n *NodePods) List() []*corev1.Pod {
	objs := n.informer.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods
}

// APIActions deletes and labels pods through the API, guarded by the pod's
// UID so a recreated pod of the same name is never touched.
type APIActions struct {
	Client kubernetes.Interface
}

// Delete deletes the pod.
func (a APIActions) Delete(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := a.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// Label sets key=value; the patch carries the UID, which the API server
// checks.
func (a APIActions) Label(ctx context.Context, pod *corev1.Pod, key, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":    pod.UID,
		"labels": map[string]string{key: value},
	}})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("labelling pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
