package injection

import (
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/kube"
)

func TestOf(t *testing.T) {
	always := "Always"
	pod := func(ns string, labels, anns map[string]string, mods ...func(*kube.Pod)) *kube.Pod {
		p := &kube.Pod{Metadata: kube.ObjectMeta{Name: "web", Namespace: ns, Labels: labels, Annotations: anns},
			Spec: kube.PodSpec{Containers: []kube.Container{{Name: "app"}}}}
		for _, m := range mods {
			m(p)
		}
		return p
	}
	withProxy := func(p *kube.Pod) { p.Spec.Containers = append(p.Spec.Containers, kube.Container{Name: ProxyContainer}) }
	nativeProxy := func(p *kube.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, kube.Container{Name: ProxyContainer, RestartPolicy: &always})
	}
	hostNet := func(p *kube.Pod) { p.Spec.HostNetwork = true }
	enabled := map[string]string{NamespaceLabel: "enabled"}
	disabled := map[string]string{NamespaceLabel: "disabled"}
	rev := map[string]string{RevisionLabel: "canary"}
	inject := func(v string) map[string]string { return map[string]string{InjectLabel: v} }
	for _, tc := range []struct {
		name     string
		pod      *kube.Pod
		ns       map[string]string
		missed   bool
		expected bool
		why      string
	}{
		// Namespace selection.
		{"istio-injection=enabled, no proxy", pod("shop", nil, nil), enabled, true, true, "istio-injection=enabled"},
		{"istio-injection=enabled, injected", pod("shop", nil, nil, withProxy), enabled, false, true, "istio-injection=enabled"},
		{"native sidecar counts as injected", pod("shop", nil, nil, nativeProxy), enabled, false, true, "istio-injection=enabled"},
		{"istio.io/rev on the namespace", pod("shop", nil, nil), rev, true, true, "istio.io/rev=canary"},
		{"istio-injection wins over istio.io/rev", pod("shop", nil, nil), map[string]string{NamespaceLabel: "disabled", RevisionLabel: "canary"}, false, false, "istio-injection=disabled"},
		{"istio-injection with another value selects nothing", pod("shop", nil, nil), map[string]string{NamespaceLabel: "true"}, false, false, "istio-injection=true"},
		{"unlabelled namespace", pod("shop", nil, nil), nil, false, false, "neither namespace"},
		// The pod's own say, in Istio's order: label, then annotation.
		{"pod label false opts out", pod("shop", inject("false"), nil), enabled, false, false, "label sidecar.istio.io/inject=false"},
		{"pod annotation false opts out", pod("shop", nil, inject("false")), enabled, false, false, "annotation sidecar.istio.io/inject=false"},
		{"the label wins over the annotation", pod("shop", inject("true"), inject("false")), enabled, true, true, "istio-injection=enabled"},
		{"label false wins over annotation true", pod("shop", inject("false"), inject("true")), enabled, false, false, "label sidecar.istio.io/inject=false"},
		{"pod label true in an unlabelled namespace", pod("shop", inject("true"), nil), nil, true, true, "label sidecar.istio.io/inject=true"},
		{"pod annotation true alone selects nothing", pod("shop", nil, inject("true")), nil, false, false, "neither namespace"},
		{"pod label true in a disabled namespace", pod("shop", inject("true"), nil), disabled, false, false, "istio-injection=disabled"},
		{"pod label istio.io/rev", pod("shop", map[string]string{RevisionLabel: "canary"}, nil), nil, true, true, "the pod has istio.io/rev=canary"},
		{"a value other than true or false is no opt-out", pod("shop", inject("no"), nil), enabled, true, true, "istio-injection=enabled"},
		// Never injected.
		{"host network", pod("shop", nil, nil, hostNet), enabled, false, false, "host network"},
		{"kube-system", pod("kube-system", nil, nil), enabled, false, false, "never injected"},
		{"an excluded namespace", pod("batch", nil, nil), enabled, false, false, "excluded"},
		{"injected but not selected is no miss", pod("shop", nil, nil, withProxy), nil, false, false, "neither namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Of(tc.pod, tc.ns, []string{"batch"})
			if v.Missed() != tc.missed || v.Expected != tc.expected || !strings.Contains(v.Why, tc.why) {
				t.Errorf("Of = %+v (missed %v); want missed %v, expected %v, why containing %q", v, v.Missed(), tc.missed, tc.expected, tc.why)
			}
			if tc.missed && !strings.HasPrefix(v.String(), "missed injection: ") {
				t.Errorf("String() = %q", v.String())
			}
		})
	}
}
