// Package injection says whether Istio's sidecar injector was meant to give
// a pod its istio-proxy, from the pod and its namespace's labels alone, and
// so whether a running pod without one missed its injection. It is pure:
// the node agent's detector and `install-cni inspect` both use it.
//
// The rules are Istio's sidecar-injector webhook's, in its order: the pod's
// sidecar.istio.io/inject label, then that annotation, then the namespace's
// istio-injection label, then the istio.io/rev revision labels
// (namespace, then pod), then the pod's inject=true label.
package injection

import (
	"fmt"

	"istio-cni.local/istio-cni/pkg/kube"
)

// The labels and annotation Istio's injection webhooks select on.
const (
	InjectLabel      = "sidecar.istio.io/inject"
	InjectAnnotation = "sidecar.istio.io/inject"
	NamespaceLabel   = "istio-injection"
	RevisionLabel    = "istio.io/rev"
	ProxyContainer   = "istio-proxy"
)

// IgnoredNamespaces are never injected by Istio, whatever their labels.
var IgnoredNamespaces = []string{"kube-system", "kube-public"}

// Verdict is what the injector was meant to do with a pod.
type Verdict struct {
	// Expected: the injector should have added istio-proxy.
	Expected bool
	// Injected: the pod has istio-proxy (a container, or an init
	// container: a native sidecar).
	Injected bool
	// Why names the rule that decided Expected.
	Why string
}

// Missed reports a pod meant to have its sidecar that has none.
func (v Verdict) Missed() bool { return v.Expected && !v.Injected }

// String is the one-line verdict the logs and inspect print.
func (v Verdict) String() string {
	switch {
	case v.Missed():
		return "missed injection: " + v.Why + ", but the pod has no " + ProxyContainer + " container"
	case v.Expected:
		return "injected: " + v.Why
	case v.Injected:
		return "has " + ProxyContainer + " though not selected for injection (" + v.Why + "): istioctl kube-inject or a hand-written spec"
	}
	return "not selected for injection: " + v.Why
}

// Of judges pod, whose namespace carries nsLabels. excluded are namespaces
// istio-cni leaves alone (its own and EXCLUDE_NAMESPACES): never reported.
func Of(pod *kube.Pod, nsLabels map[string]string, excluded []string) Verdict {
	v := Verdict{Injected: hasProxy(pod)}
	v.Expected, v.Why = expected(pod, nsLabels, excluded)
	return v
}

func expected(pod *kube.Pod, nsLabels map[string]string, excluded []string) (bool, string) {
	ns := pod.Metadata.Namespace
	for _, list := range [][]string{IgnoredNamespaces, excluded} {
		for _, n := range list {
			if n == ns {
				return false, "namespace " + ns + " is never injected or is excluded"
			}
		}
	}
	if pod.Spec.HostNetwork {
		return false, "the pod uses the host network"
	}
	// The label wins over the annotation; only "true" and "false" mean
	// anything to the webhooks' selectors and to the injector.
	podSays, from := pod.Metadata.Annotations[InjectAnnotation], "annotation"
	if l, ok := pod.Metadata.Labels[InjectLabel]; ok {
		podSays, from = l, "label"
	}
	if podSays == "false" {
		return false, fmt.Sprintf("the pod's %s %s=false opts it out", from, InjectLabel)
	}
	if v, ok := nsLabels[NamespaceLabel]; ok {
		if v == "enabled" {
			return true, fmt.Sprintf("namespace %s has %s=enabled", ns, NamespaceLabel)
		}
		// Every webhook but this one's requires the label to be absent.
		return false, fmt.Sprintf("namespace %s has %s=%s", ns, NamespaceLabel, v)
	}
	if rev, ok := nsLabels[RevisionLabel]; ok {
		return true, fmt.Sprintf("namespace %s has %s=%s", ns, RevisionLabel, rev)
	}
	if rev, ok := pod.Metadata.Labels[RevisionLabel]; ok {
		return true, fmt.Sprintf("the pod has %s=%s", RevisionLabel, rev)
	}
	if from == "label" && podSays == "true" {
		return true, fmt.Sprintf("the pod's label %s=true", InjectLabel)
	}
	return false, fmt.Sprintf("neither namespace %s nor the pod is labelled for injection", ns)
}

// hasProxy finds istio-proxy among the containers or init containers.
func hasProxy(pod *kube.Pod) bool {
	for _, cs := range [][]kube.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == ProxyContainer {
				return true
			}
		}
	}
	return false
}
