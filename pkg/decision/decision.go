// Package decision decides, from a pod alone, whether the plugin must
// redirect its traffic, and with what spec. It is pure: the same answer serves
// ADD, CHECK and any later audit of the node.
package decision

import (
	"slices"
	"strconv"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// Names Istio gives the containers and metadata the decision reads.
const (
	ProxyContainer    = "istio-proxy"
	InitContainer     = "istio-init"
	StatusAnnotation  = "sidecar.istio.io/status"
	InjectAnnotation  = "sidecar.istio.io/inject"
	InjectLabel       = "sidecar.istio.io/inject"
	InterceptionMode  = "sidecar.istio.io/interceptionMode"
	envDisableEnvoy   = "DISABLE_ENVOY"
	envDNSCapture     = "ISTIO_META_DNS_CAPTURE"
	envDualStack      = "ISTIO_DUAL_STACK"
	envInvalidDrop    = "INVALID_DROP"
	restartAlways     = "Always"
	sidecarProxyType  = "sidecar"
	proxyArgsSubcmd   = "proxy"
	interceptRedirect = "REDIRECT"
	interceptTProxy   = "TPROXY"
	interceptNone     = "NONE"
	allowedIntercepts = "REDIRECT, TPROXY or NONE"
)

// Reason says why a pod is, or is not, redirected. It goes into the log line
// of every ADD.
type Reason string

const (
	Redirected        Reason = "redirect"
	NotKubernetes     Reason = "no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS"
	ExcludedNamespace Reason = "namespace excluded"
	IstioInitPresent  Reason = "istio-init init container present (it programs the rules itself)"
	EnvoyDisabled     Reason = "DISABLE_ENVOY=true on istio-proxy"
	NoProxy           Reason = "no istio-proxy container"
	NotSidecar        Reason = "istio-proxy is not a sidecar"
	InjectDisabled    Reason = "sidecar.istio.io/inject is false"
	NoStatus          Reason = "no sidecar.istio.io/status annotation"
	HostNetwork       Reason = "pod uses the host network"
	InterceptNone     Reason = "sidecar.istio.io/interceptionMode is NONE"
	Recorded          Reason = "redirected at ADD (as recorded)"
)

// Decision is the outcome for one pod.
type Decision struct {
	Redirect bool
	Reason   Reason
	// Spec is set when Redirect is.
	Spec iptables.Spec
	// DualStack asks for IPv6 rules even when the pod has no IPv6 address
	// yet (ISTIO_DUAL_STACK on istio-proxy).
	DualStack bool
	// Unread names the istio-proxy env vars the decision reads that are
	// set with valueFrom, which only the kubelet resolves: taken as unset,
	// as upstream istio-cni takes them (UnreadNote).
	Unread []string
	// NotBool names the istio-proxy env vars the decision reads that are
	// set to a value that is not true or false: taken as false, as the
	// proxy and upstream istio-cni take them (NotBoolNote).
	NotBool []string
}

// UnreadNote is what is said of a pod whose proxy sets env vars the
// decision reads with valueFrom.
func UnreadNote(names []string) string {
	return "istio-proxy sets " + strings.Join(names, ", ") + " with valueFrom, which istio-cni cannot read before the pod starts: " +
		"taken as unset, as upstream istio-cni takes such settings; set them with value for the rules to follow them"
}

// NotBoolNote is what is said of a pod whose proxy sets env vars the
// decision reads to values that are not booleans.
func NotBoolNote(names []string) string {
	return "istio-proxy sets " + strings.Join(names, ", ") + " to a value that is not true or false: " +
		"taken as false, as the proxy and upstream istio-cni take it; set true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)"
}

func skip(r Reason) Decision { return Decision{Reason: r} }

// Namespace decides what can be decided before the pod is read: pods in an
// excluded namespace pass through with no API call. It returns false when
// the pod must be read. The agent's own namespace is not excluded: when
// istio-cni is installed into istio-system, as upstream's users do, its
// sidecar pods are meshed like any other (the agent itself runs on the
// host network, with no CNI call).
func Namespace(ns string, excluded []string) (Decision, bool) {
	if slices.Contains(excluded, ns) {
		return skip(ExcludedNamespace), true
	}
	return Decision{}, false
}

// Annotations decides what the pod's annotations alone settle, as the
// runtime passed them to ADD (nil: it passed none). A pod without the
// injector's sidecar.istio.io/status annotation was never injected: Pod
// passes it through whatever else it holds (every check before that one
// also only passes through), so no lookup, and no credential, is needed.
// It returns false when the pod must be read.
func Annotations(a map[string]string) (Decision, bool) {
	if a == nil {
		return Decision{}, false
	}
	if _, ok := a[StatusAnnotation]; !ok {
		return skip(NoStatus), true
	}
	return Decision{}, false
}

// Pod decides for a pod read from the API, in istio-cni's order. An error
// means the pod must be redirected but its settings are invalid; nothing
// may be programmed then.
func Pod(pod *kube.Pod) (Decision, error) {
	if pod.Spec.HostNetwork {
		return skip(HostNetwork), nil
	}
	if findContainer(pod.Spec.InitContainers, InitContainer) != nil {
		return skip(IstioInitPresent), nil
	}
	proxy := proxyContainer(pod)
	if proxy == nil {
		return skip(NoProxy), nil
	}
	env := envOf(proxy)
	if off, _ := envBool(env, envDisableEnvoy); off {
		return skip(EnvoyDisabled), nil
	}
	if len(proxy.Args) >= 2 && proxy.Args[0] == proxyArgsSubcmd && proxy.Args[1] != sidecarProxyType {
		return skip(NotSidecar), nil
	}
	if injectDisabled(pod.Metadata) {
		return skip(InjectDisabled), nil
	}
	if _, ok := pod.Metadata.Annotations[StatusAnnotation]; !ok {
		return skip(NoStatus), nil
	}
	return redirect(pod, proxy, env)
}

// proxyContainer finds istio-proxy as a regular container or as a native
// sidecar (an init container that restarts Always).
func proxyContainer(pod *kube.Pod) *kube.Container {
	if c := findContainer(pod.Spec.Containers, ProxyContainer); c != nil {
		return c
	}
	c := findContainer(pod.Spec.InitContainers, ProxyContainer)
	if c != nil && c.RestartPolicy != nil && *c.RestartPolicy == restartAlways {
		return c
	}
	return nil
}

func findContainer(cs []kube.Container, name string) *kube.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

func envOf(c *kube.Container) map[string]string {
	env := make(map[string]string, len(c.Env))
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// injectDisabled reads sidecar.istio.io/inject; the label is the newer API
// and wins over the annotation.
func injectDisabled(m kube.ObjectMeta) bool {
	v, ok := m.Labels[InjectLabel]
	if !ok {
		v = m.Annotations[InjectAnnotation]
	}
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}
