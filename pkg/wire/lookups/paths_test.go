package lookups

import (
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
)

// The same pods through both paths the plugin reads a pod by: the API's
// JSON decoded as pkg/kube/apiclient does it and passed on by the helper, and the agent's informer copy
// (apipod.ToKube) sent over a real socket. The pods and the decisions must
// be identical, whatever the pod carries that the decision reads.
func TestBothPathsDecideAlike(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	uid := int64(1337)
	proxy := corev1.Container{Name: "istio-proxy", Image: "proxy:v1", Args: []string{"proxy", "sidecar"}}
	app := corev1.Container{Name: "app", Image: "app:v1"}
	withEnv := proxy
	withEnv.Env = []corev1.EnvVar{{Name: "ISTIO_META_DNS_CAPTURE", Value: "true"},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	withEnv.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
	native := proxy
	native.RestartPolicy = &always
	status := map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
	ann := func(kv ...string) map[string]string {
		m := map[string]string{"sidecar.istio.io/status": "{}"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	pods := map[string]corev1.Pod{
		"plain":         {Spec: corev1.PodSpec{Containers: []corev1.Container{app}}},
		"meshed":        {ObjectMeta: metav1.ObjectMeta{Annotations: status}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
		"native":        {ObjectMeta: metav1.ObjectMeta{Annotations: status}, Spec: corev1.PodSpec{InitContainers: []corev1.Container{native}, Containers: []corev1.Container{app}}},
		"dns and uid":   {ObjectMeta: metav1.ObjectMeta{Annotations: status}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, withEnv}}},
		"host network":  {ObjectMeta: metav1.ObjectMeta{Annotations: status}, Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{app, proxy}}},
		"opted out":     {ObjectMeta: metav1.ObjectMeta{Annotations: ann("sidecar.istio.io/inject", "false")}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
		"tproxy":        {ObjectMeta: metav1.ObjectMeta{Annotations: ann("sidecar.istio.io/interceptionMode", "TPROXY")}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
		"ports and ips": {ObjectMeta: metav1.ObjectMeta{Annotations: ann("traffic.sidecar.istio.io/excludeOutboundPorts", "5432,6379", "traffic.sidecar.istio.io/includeInboundPorts", "8080", "traffic.sidecar.istio.io/excludeOutboundIPRanges", "10.0.0.0/8")}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
		"refused value": {ObjectMeta: metav1.ObjectMeta{Annotations: ann("traffic.sidecar.istio.io/excludeOutboundPorts", "http")}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
		"labelled":      {ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"sidecar.istio.io/inject": "true", "app": "web"}, Annotations: status}, Spec: corev1.PodSpec{Containers: []corev1.Container{app, proxy}}},
	}
	// Written here, read by the server's goroutines: a socket is no
	// happens-before edge the race detector sees.
	var mu sync.Mutex
	held := map[string]*kube.Pod{}
	path := serve(t, func(ns, name string) (*kube.Pod, bool) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := held[name]
		return p, ok
	})
	for name, pod := range pods {
		pod.Name, pod.Namespace, pod.UID = name, "team-a", types.UID("uid-"+name)
		pod.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.7"}}
		// The API path: the object's JSON, decoded as pkg/kube's client does.
		data, err := json.Marshal(&pod)
		if err != nil {
			t.Fatal(err)
		}
		var decoded, fromAPI kube.Pod
		if err := json.Unmarshal(data, &decoded); err != nil {
			t.Fatal(err)
		}
		// ... and through the helper's JSON reply (pkg/kube/apilookup).
		if data, err = json.Marshal(&decoded); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &fromAPI); err != nil {
			t.Fatal(err)
		}
		// The agent path: its informer's object, over the socket.
		agentPod, err := apipod.ToKube(&pod)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		held[name] = agentPod
		mu.Unlock()
		ans, err := Get(path, "team-a", name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fromAgent := ans.Pod
		if !reflect.DeepEqual(&fromAPI, fromAgent) {
			t.Errorf("%s: the paths read different pods:\nAPI   %+v\nagent %+v", name, fromAPI, *fromAgent)
		}
		dAPI, errAPI := decision.Pod(&fromAPI)
		dAgent, errAgent := decision.Pod(fromAgent)
		if !reflect.DeepEqual(dAPI, dAgent) || !reflect.DeepEqual(errAPI, errAgent) {
			t.Errorf("%s: the decisions differ:\nAPI   %+v %v\nagent %+v %v", name, dAPI, errAPI, dAgent, errAgent)
		}
	}
}
