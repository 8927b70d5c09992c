package podcache

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
	"istio-cni.local/istio-cni/test/poll"
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

// A lookup finds the pod converted when the informer heard of its version
// (one view, shared), and never an older version's: a change the API
// makes is in the next lookup that reads it; a deleted pod's view goes.
func TestLookupViewsEachVersion(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1", ResourceVersion: "1",
			Annotations: map[string]string{"sidecar.istio.io/status": "{}"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app"}, {Name: "istio-proxy"}}},
	}
	cs := fake.NewClientset(pod.DeepCopy())
	pods, err := New(clientset.Of(cs), "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !pods.Start(ctx) {
		t.Fatal("not synced")
	}
	viewed := func(version string) (bool, string) {
		pods.mu.Lock()
		defer pods.mu.Unlock()
		v, ok := pods.views["shop/web-1"]
		return ok && v.version == version, fmt.Sprintf("views: %+v", pods.views)
	}
	poll.Until(t, 10*time.Second, "the informer's handler viewing version 1", func() (bool, string) { return viewed("1") })
	first, ok := pods.Lookup("shop", "web-1")
	again, _ := pods.Lookup("shop", "web-1")
	if !ok || first != again || first.Metadata.Annotations["sidecar.istio.io/status"] != "{}" {
		t.Fatalf("two lookups of version 1: %p %p (%+v): want one view, shared", first, again, first)
	}
	// A version the handler has not viewed yet, or another pod of the
	// same name and version, is converted, not served the old view, and
	// not stored: only the handler stores views.
	for _, other := range []func(p *corev1.Pod){
		func(p *corev1.Pod) { p.ResourceVersion = "9" },
		func(p *corev1.Pod) { p.UID = "u2" },
	} {
		p := pod.DeepCopy()
		other(p)
		p.Annotations["sidecar.istio.io/status"] = "changed"
		if kp, err := pods.view(p); err != nil || kp.Metadata.Annotations["sidecar.istio.io/status"] != "changed" || kp.Metadata.UID != string(p.UID) {
			t.Errorf("view of %s version %s: %+v, %v: want it converted", p.UID, p.ResourceVersion, kp, err)
		}
		if ok, views := viewed("1"); !ok {
			t.Errorf("a lookup's conversion stored a view: %s", views)
		}
	}

	pod.ResourceVersion = "2"
	pod.Annotations = map[string]string{"sidecar.istio.io/status": "{}", "traffic.sidecar.istio.io/excludeOutboundPorts": "25"}
	if _, err := cs.CoreV1().Pods("shop").Update(ctx, pod.DeepCopy(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the cache holding version 2", func() (bool, string) {
		p, _ := pods.Get("shop", "web-1")
		// Whenever the cache has version 2, so does the lookup, whether
		// the handler has viewed it yet or not.
		kp, _ := pods.Lookup("shop", "web-1")
		if p.ResourceVersion == "2" && kp.Metadata.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"] != "25" {
			t.Fatalf("the cache holds version 2, the lookup %+v", kp.Metadata.Annotations)
		}
		return p.ResourceVersion == "2", "version " + p.ResourceVersion
	})

	if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the deleted pod's view gone", func() (bool, string) {
		_, found := pods.Lookup("shop", "web-1")
		pods.mu.Lock()
		defer pods.mu.Unlock()
		return !found && len(pods.views) == 0, fmt.Sprintf("found %v, views %+v", found, pods.views)
	})
}

// injectedPod is a pod shaped as istiod's injector leaves one: the
// proxy's environment, mounts and probes, and the volumes they use.
func injectedPod() *corev1.Pod {
	var env []corev1.EnvVar
	for i := range 30 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ISTIO_META_SETTING_%d", i), Value: "value-of-the-setting"})
	}
	env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	var mounts []corev1.VolumeMount
	var volumes []corev1.Volume
	for _, v := range []string{"workload-socket", "credential-socket", "workload-certs", "istio-envoy", "istio-data", "istio-podinfo", "istio-token", "istiod-ca-cert"} {
		mounts = append(mounts, corev1.VolumeMount{Name: v, MountPath: "/var/run/" + v})
		volumes = append(volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready"}}, PeriodSeconds: 15}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"app": "web", "security.istio.io/tlsMode": "istio", "service.istio.io/canonical-name": "web"},
			Annotations: map[string]string{"sidecar.istio.io/status": `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"]}`,
				"kubectl.kubernetes.io/default-container": "web", "prometheus.io/port": "15020", "prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Volumes: volumes,
			Containers: []corev1.Container{{Name: "web", Image: "web:v1"},
				{Name: "istio-proxy", Image: "proxyv2:1.28", Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"},
					Env: env, VolumeMounts: mounts, ReadinessProbe: probe, StartupProbe: probe}}},
	}
}

// What a lookup on an ADD costs with the version viewed when the informer
// heard it, against converting the API object there.
func BenchmarkLookupInjectedPod(b *testing.B) {
	pod := injectedPod()
	b.Run("viewed", func(b *testing.B) {
		n := &Pods{views: map[string]view{}}
		n.heard(pod)
		for b.Loop() {
			if _, err := n.view(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("converted", func(b *testing.B) {
		for b.Loop() {
			if _, err := apipod.ToKube(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
}
