package decision

import (
	"errors"
	"reflect"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// podOpt changes a pod under construction.
type podOpt func(*kube.Pod)

// plainPod is a pod with one application container and nothing of Istio.
func plainPod(opts ...podOpt) *kube.Pod {
	p := &kube.Pod{
		Metadata: kube.ObjectMeta{Name: "app", Namespace: "default", UID: "uid-1"},
		Spec:     kube.PodSpec{Containers: []kube.Container{{Name: "app"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// meshedPod is a pod as the injector leaves it: an istio-proxy container and
// the sidecar.istio.io/status annotation.
func meshedPod(opts ...podOpt) *kube.Pod {
	return plainPod(append([]podOpt{withProxy(), withAnn(StatusAnnotation, `{"containers":["istio-proxy"]}`)}, opts...)...)
}

// nativeSidecarPod is a meshed pod whose istio-proxy is an init container
// that restarts Always.
func nativeSidecarPod(opts ...podOpt) *kube.Pod {
	return plainPod(append([]podOpt{withInit(proxyAsInit(restartAlways)), withAnn(StatusAnnotation, "{}")}, opts...)...)
}

func proxyAsInit(policy string) kube.Container {
	c := kube.Container{Name: ProxyContainer, Args: []string{"proxy", "sidecar"}}
	if policy != "" {
		c.RestartPolicy = &policy
	}
	return c
}

func withProxy() podOpt {
	return withContainer(kube.Container{Name: ProxyContainer, Args: []string{"proxy", "sidecar"}})
}

func withContainer(c kube.Container) podOpt {
	return func(p *kube.Pod) { p.Spec.Containers = append(p.Spec.Containers, c) }
}

func withInit(c kube.Container) podOpt {
	return func(p *kube.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, c) }
}

func withAnn(k, v string) podOpt {
	return func(p *kube.Pod) {
		if p.Metadata.Annotations == nil {
			p.Metadata.Annotations = map[string]string{}
		}
		p.Metadata.Annotations[k] = v
	}
}

func withLabel(k, v string) podOpt {
	return func(p *kube.Pod) {
		if p.Metadata.Labels == nil {
			p.Metadata.Labels = map[string]string{}
		}
		p.Metadata.Labels[k] = v
	}
}

func withoutAnn(k string) podOpt {
	return func(p *kube.Pod) { delete(p.Metadata.Annotations, k) }
}

func hostNetwork(p *kube.Pod) { p.Spec.HostNetwork = true }

// onProxy changes istio-proxy wherever it is (container or init container).
func onProxy(f func(*kube.Container)) podOpt {
	return func(p *kube.Pod) {
		for _, cs := range [][]kube.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for i := range cs {
				if cs[i].Name == ProxyContainer {
					f(&cs[i])
				}
			}
		}
	}
}

func proxyEnv(name, value string) podOpt {
	return onProxy(func(c *kube.Container) { c.Env = append(c.Env, kube.EnvVar{Name: name, Value: value}) })
}

func proxyArgs(args ...string) podOpt {
	return onProxy(func(c *kube.Container) { c.Args = args })
}

func proxyIDs(uid, gid *int64) podOpt {
	return onProxy(func(c *kube.Container) {
		c.SecurityContext = &kube.SecurityContext{RunAsUser: uid, RunAsGroup: gid}
	})
}

func i64(v int64) *int64 { return &v }

// errKind names the error type a case expects.
type errKind int

const (
	noErr errKind = iota
	invalid
)

// checkErrKind asserts err is of the kind expected.
func checkErrKind(t *testing.T, err error, want errKind) {
	t.Helper()
	var inv *InvalidError
	switch want {
	case noErr:
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
	case invalid:
		if !errors.As(err, &inv) {
			t.Fatalf("error = %v (%T), want *InvalidError", err, err)
		}
	}
}

type podCase struct {
	name string
	pod  *kube.Pod
	// reason is the expected reason; ignored when err is not noErr.
	reason Reason
	err    errKind
	dual   bool
}

func skipCases() []podCase {
	return []podCase{
		{name: "plain pod", pod: plainPod(), reason: NoProxy},
		{name: "status but no proxy", pod: plainPod(withAnn(StatusAnnotation, "{}")), reason: NoProxy},
		{name: "proxy but no status", pod: meshedPod(withoutAnn(StatusAnnotation)), reason: NoStatus},
		{name: "proxy init container without restartPolicy", pod: plainPod(withInit(proxyAsInit("")), withAnn(StatusAnnotation, "{}")), reason: NoProxy},
		{name: "proxy init container restartPolicy OnFailure", pod: plainPod(withInit(proxyAsInit("OnFailure")), withAnn(StatusAnnotation, "{}")), reason: NoProxy},
		{name: "native sidecar without status", pod: nativeSidecarPod(withoutAnn(StatusAnnotation)), reason: NoStatus},
		{name: "istio-init and istio-proxy", pod: meshedPod(withInit(kube.Container{Name: InitContainer})), reason: IstioInitPresent},
		{name: "istio-init after other init containers", pod: meshedPod(withInit(kube.Container{Name: "setup"}), withInit(kube.Container{Name: InitContainer})), reason: IstioInitPresent},
		{name: "istio-init and native sidecar", pod: nativeSidecarPod(withInit(kube.Container{Name: InitContainer})), reason: IstioInitPresent},
		{name: "istio-init with bad annotations", pod: meshedPod(withInit(kube.Container{Name: InitContainer}), withAnn(IncludeInboundPorts, "80 -j ACCEPT")), reason: IstioInitPresent},
		{name: "host network", pod: meshedPod(hostNetwork), reason: HostNetwork},
		{name: "host network native sidecar", pod: nativeSidecarPod(hostNetwork), reason: HostNetwork},
		{name: "host network with istio-init", pod: meshedPod(hostNetwork, withInit(kube.Container{Name: InitContainer})), reason: HostNetwork},
		{name: "DISABLE_ENVOY=true", pod: meshedPod(proxyEnv("DISABLE_ENVOY", "true")), reason: EnvoyDisabled},
		{name: "DISABLE_ENVOY=true native sidecar", pod: nativeSidecarPod(proxyEnv("DISABLE_ENVOY", "true")), reason: EnvoyDisabled},
		{name: "proxy router", pod: meshedPod(proxyArgs("proxy", "router")), reason: NotSidecar},
		{name: "proxy waypoint", pod: meshedPod(proxyArgs("proxy", "waypoint", "--log")), reason: NotSidecar},
		{name: "native proxy router", pod: nativeSidecarPod(proxyArgs("proxy", "router")), reason: NotSidecar},
		{name: "inject annotation false", pod: meshedPod(withAnn(InjectAnnotation, "false")), reason: InjectDisabled},
		{name: "inject label false", pod: meshedPod(withLabel(InjectLabel, "false")), reason: InjectDisabled},
		{name: "label false wins over annotation true", pod: meshedPod(withLabel(InjectLabel, "false"), withAnn(InjectAnnotation, "true")), reason: InjectDisabled},
		{name: "inject false with bad annotations", pod: meshedPod(withAnn(InjectAnnotation, "false"), withAnn(ExcludeInboundPorts, "*")), reason: InjectDisabled},
		{name: "interceptionMode NONE", pod: meshedPod(withAnn(InterceptionMode, "NONE")), reason: InterceptNone},
		{name: "interceptionMode NONE with bad annotations", pod: meshedPod(withAnn(InterceptionMode, "NONE"), withAnn(IncludeOutboundIPRanges, "10.0.0.1")), reason: InterceptNone},
	}
}

func redirectCases() []podCase {
	return []podCase{
		{name: "meshed pod", pod: meshedPod(), reason: Redirected},
		{name: "native sidecar", pod: nativeSidecarPod(), reason: Redirected},
		{name: "regular proxy wins over plain init proxy", pod: meshedPod(withInit(proxyAsInit(""))), reason: Redirected},
		{name: "istio-init as a regular container", pod: meshedPod(withContainer(kube.Container{Name: InitContainer})), reason: Redirected},
		{name: "DISABLE_ENVOY=false", pod: meshedPod(proxyEnv("DISABLE_ENVOY", "false")), reason: Redirected},
		{name: "DISABLE_ENVOY on the app", pod: meshedPod(func(p *kube.Pod) { p.Spec.Containers[0].Env = []kube.EnvVar{{Name: "DISABLE_ENVOY", Value: "true"}} }), reason: Redirected},
		{name: "proxy sidecar", pod: meshedPod(proxyArgs("proxy", "sidecar")), reason: Redirected},
		{name: "no args", pod: meshedPod(proxyArgs()), reason: Redirected},
		{name: "args proxy only", pod: meshedPod(proxyArgs("proxy")), reason: Redirected},
		{name: "inject annotation true", pod: meshedPod(withAnn(InjectAnnotation, "true")), reason: Redirected},
		{name: "inject label true", pod: meshedPod(withLabel(InjectLabel, "true")), reason: Redirected},
		{name: "label true wins over annotation false", pod: meshedPod(withLabel(InjectLabel, "true"), withAnn(InjectAnnotation, "false")), reason: Redirected},
		{name: "empty status annotation", pod: meshedPod(withAnn(StatusAnnotation, "")), reason: Redirected},
		{name: "interceptionMode REDIRECT", pod: meshedPod(withAnn(InterceptionMode, "REDIRECT")), reason: Redirected},
		{name: "DNS capture false", pod: meshedPod(proxyEnv("ISTIO_META_DNS_CAPTURE", "false")), reason: Redirected},
		{name: "dual stack", pod: meshedPod(proxyEnv("ISTIO_DUAL_STACK", "true")), reason: Redirected, dual: true},
		{name: "dual stack native sidecar", pod: nativeSidecarPod(proxyEnv("ISTIO_DUAL_STACK", "true")), reason: Redirected, dual: true},
		{name: "dual stack false", pod: meshedPod(proxyEnv("ISTIO_DUAL_STACK", "false")), reason: Redirected},
		{name: "blank excludeInterfaces", pod: meshedPod(withAnn(ExcludeInterfaces, " ")), reason: Redirected},
	}
}

func errorCases() []podCase {
	return []podCase{
		{name: "interceptionMode lower case", pod: meshedPod(withAnn(InterceptionMode, "redirect")), err: invalid},
		{name: "interceptionMode bogus", pod: meshedPod(withAnn(InterceptionMode, "BOGUS")), err: invalid},
		{name: "excludeInterfaces bad name", pod: meshedPod(withAnn(ExcludeInterfaces, "eth1;x")), err: invalid},
		{name: "kubevirtInterfaces too long native sidecar", pod: nativeSidecarPod(withAnn(KubevirtInterfaces, "net1,abcdefghijklmnop")), err: invalid},
		{name: "bad port", pod: meshedPod(withAnn(IncludeInboundPorts, "http")), err: invalid},
		{name: "bad CIDR native sidecar", pod: nativeSidecarPod(withAnn(ExcludeOutboundIPRanges, "10.0.0.1")), err: invalid},
		{name: "negative uid", pod: meshedPod(proxyIDs(i64(-1), nil)), err: invalid},
	}
}

func TestPod(t *testing.T) {
	for _, group := range [][]podCase{skipCases(), redirectCases(), errorCases()} {
		for _, tc := range group {
			t.Run(tc.name, func(t *testing.T) {
				d, err := Pod(tc.pod)
				checkErrKind(t, err, tc.err)
				if tc.err != noErr {
					if d.Redirect {
						t.Fatalf("decision on error is a redirect: %+v", d)
					}
					return
				}
				if d.Reason != tc.reason {
					t.Errorf("reason = %q, want %q", d.Reason, tc.reason)
				}
				if want := tc.reason == Redirected; d.Redirect != want {
					t.Errorf("Redirect = %v, want %v", d.Redirect, want)
				}
				if d.DualStack != tc.dual {
					t.Errorf("DualStack = %v, want %v", d.DualStack, tc.dual)
				}
				if d.Redirect && !specEqual(d.Spec, iptables.DefaultSpec()) {
					t.Errorf("spec of an unannotated pod = %+v, want the default %+v", d.Spec, iptables.DefaultSpec())
				}
				if !d.Redirect && !reflect.DeepEqual(d.Spec, iptables.Spec{}) {
					t.Errorf("skip carries a spec: %+v", d.Spec)
				}
			})
		}
	}
}

// TestPodDoesNotMutate checks the decision leaves the pod as it found it.
func TestPodDoesNotMutate(t *testing.T) {
	pod := meshedPod(withAnn(ExcludeInboundPorts, "22,15021"), proxyIDs(i64(1000), nil))
	before := meshedPod(withAnn(ExcludeInboundPorts, "22,15021"), proxyIDs(i64(1000), nil))
	if _, err := Pod(pod); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Errorf("pod changed:\n%+v\nwant\n%+v", pod, before)
	}
}

func TestNamespace(t *testing.T) {
	excluded := []string{"kube-system", "istio-system"}
	for _, tc := range []struct {
		name, ns string
		decided  bool
		reason   Reason
	}{
		{name: "excluded", ns: "kube-system", decided: true, reason: ExcludedNamespace},
		{name: "another excluded", ns: "istio-system", decided: true, reason: ExcludedNamespace},
		{name: "ordinary namespace", ns: "default"},
		{name: "the agent's own namespace is ordinary", ns: "istio-cni"},
		{name: "empty namespace", ns: ""},
		{name: "prefix of an excluded name", ns: "kube"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, decided := Namespace(tc.ns, excluded)
			if decided != tc.decided {
				t.Fatalf("decided = %v, want %v", decided, tc.decided)
			}
			if d.Redirect {
				t.Errorf("namespace decision is a redirect: %+v", d)
			}
			if decided && d.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", d.Reason, tc.reason)
			}
		})
	}
}

// What the runtime's annotations settle alone is what Pod decides: a pod
// they pass through is never one Pod would redirect or refuse; pods they
// cannot settle are read.
func TestAnnotationsAgreeWithPod(t *testing.T) {
	var settled int
	for _, tc := range append(append(skipCases(), redirectCases()...), errorCases()...) {
		d, decided := Annotations(tc.pod.Metadata.Annotations)
		if tc.pod.Metadata.Annotations == nil && !decided {
			// A pod with no annotations at all still reaches the runtime
			// as an empty map.
			d, decided = Annotations(map[string]string{})
		}
		if !decided {
			continue
		}
		settled++
		if got, err := Pod(tc.pod); err != nil || got.Redirect || d.Redirect {
			t.Errorf("%s: the annotations pass it through, Pod decides %+v, %v", tc.name, got, err)
		}
	}
	if settled == 0 {
		t.Fatal("no case was settled by its annotations")
	}
	if _, decided := Annotations(nil); decided {
		t.Error("no annotations from the runtime settled a pod")
	}
	if _, decided := Annotations(map[string]string{StatusAnnotation: "{}"}); decided {
		t.Error("an injected pod was settled without being read")
	}
}

// INVALID_DROP=true on istio-proxy (often set mesh-wide through
// proxyMetadata) is programmed as upstream's plugin programs it, never
// refused and never dropped silently.
func TestInvalidDrop(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "1": true, "false": false, "": false} {
		d, err := Pod(meshedPod(proxyEnv("INVALID_DROP", value)))
		if err != nil || !d.Redirect || d.Spec.InvalidDrop != want {
			t.Errorf("INVALID_DROP=%q: %+v, %v; want redirected with InvalidDrop %v", value, d, err, want)
		}
	}
}
