package podcache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
)

// Every handler hears each pod; the cache serves the plugin's subset,
// without managed fields.
func TestHandlersAndLookup(t *testing.T) {
	cs := fake.NewClientset(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1",
			Annotations:   map[string]string{"sidecar.istio.io/status": "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app"}, {Name: "istio-proxy"}}},
	})
	pods, err := New(clientset.Of(cs), "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 4)
	for range 2 {
		if err := pods.OnChange(func(p *corev1.Pod) { heard <- string(p.UID) }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !pods.Start(ctx) || !pods.Synced() {
		t.Fatal("not synced")
	}
	for range 2 {
		select {
		case uid := <-heard:
			if uid != "u1" {
				t.Errorf("heard %q", uid)
			}
		case <-ctx.Done():
			t.Fatal("a handler heard nothing")
		}
	}
	p, ok := pods.Get("shop", "web-1")
	if !ok || p.ManagedFields != nil {
		t.Errorf("Get = %v, %v: want the pod without managed fields", p, ok)
	}
	kp, ok := pods.Lookup("shop", "web-1")
	if !ok || kp.Metadata.UID != "u1" || len(kp.Spec.Containers) != 2 || kp.Metadata.Annotations["sidecar.istio.io/status"] != "{}" {
		t.Errorf("Lookup = %+v, %v", kp, ok)
	}
	if _, ok := pods.Lookup("shop", "web-2"); ok {
		t.Error("Lookup of an absent pod: found")
	}
	if n := len(pods.List()); n != 1 {
		t.Errorf("List: %d pods", n)
	}
}
