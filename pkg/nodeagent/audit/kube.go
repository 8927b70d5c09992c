package audit

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// APIActions deletes and labels pods through the API, guarded by the pod's
// UID so a recreated pod of the same name is never touched.
type APIActions struct {
	Client kubeclient.Interface
}

// Delete deletes the pod.
func (a APIActions) Delete(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	err := a.Client.Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
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
	_, err = a.Client.Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("labelling pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
