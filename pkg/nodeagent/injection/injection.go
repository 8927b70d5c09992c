// Package injection says whether Istio's sidecar injector was meant to give
// a pod its istio-proxy, and so whether a running pod without one missed
// its injection. It is pure: the node agent's detector and `install-cni
// inspect` both use it, each with the View of the cluster's injectors it
// could read.
//
// A pod is injected when the API server calls an injector for it (one of
// its MutatingWebhookConfiguration's webhooks selects the pod's namespace
// and the pod, selectors.go) and the injector then decides to
// (Required, upstream's injectRequired, with its ConfigMap's policy and
// selectors, required.go).
package injection

import (
	"fmt"
	"strings"

	"istio-cni.local/istio-cni/pkg/kube"
)

// The labels and annotation Istio's injection webhooks select on.
const (
	InjectLabel      = "sidecar.istio.io/inject"
	InjectAnnotation = "sidecar.istio.io/inject"
	NamespaceLabel   = "istio-injection"
	RevisionLabel    = "istio.io/rev"
	ProxyContainer   = "istio-proxy"
	// namespaceNameLabel is the label the API server puts on every
	// namespace, which webhooks' namespace selectors may match.
	namespaceNameLabel = "kubernetes.io/metadata.name"
)

// IgnoredNamespaces are never injected by Istio, whatever their labels
// (upstream's inject.IgnoredNamespaces).
var IgnoredNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "local-path-storage"}

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

// Of judges pod, whose namespace carries nsLabels, against the injectors
// in view. excluded are namespaces istio-cni leaves alone
// (EXCLUDE_NAMESPACES): never reported.
func Of(pod *kube.Pod, nsLabels map[string]string, excluded []string, view View) Verdict {
	v := Verdict{Injected: hasProxy(pod)}
	v.Expected, v.Why = expected(pod, nsLabels, excluded, view)
	return v
}

func expected(pod *kube.Pod, nsLabels map[string]string, excluded []string, view View) (bool, string) {
	ns := pod.Metadata.Namespace
	for _, n := range excluded {
		if n == ns {
			return false, "namespace " + ns + " is excluded from istio-cni"
		}
	}
	withName := make(map[string]string, len(nsLabels)+1)
	for k, v := range nsLabels {
		withName[k] = v
	}
	withName[namespaceNameLabel] = ns
	var notRequired []string
	for _, inj := range view.Injectors {
		wh, ok := inj.selects(withName, pod.Metadata.Labels)
		if !ok {
			continue
		}
		called := fmt.Sprintf("webhook %s (revision %s) selects it", wh, inj.Revision)
		required, why := Required(inj.Config, ns, pod.Spec.HostNetwork, pod.Metadata.Labels, pod.Metadata.Annotations)
		if required {
			return true, called + " and the injector injects it: " + why
		}
		notRequired = append(notRequired, called+" but the injector skips it: "+why)
	}
	if len(notRequired) > 0 {
		return false, strings.Join(notRequired, "; ")
	}
	return false, fmt.Sprintf("no injector webhook selects namespace %s and the pod (%s)", ns, view.From)
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
