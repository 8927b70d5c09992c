package injection

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio-cni.local/istio-cni/pkg/kube"
)

func TestOfWithTheChartsWebhooks(t *testing.T) {
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
		{"istio-injection=enabled, no proxy", pod("shop", nil, nil), enabled, true, true, "webhook namespace.sidecar-injector.istio.io"},
		{"istio-injection=enabled, injected", pod("shop", nil, nil, withProxy), enabled, false, true, "namespace.sidecar-injector.istio.io"},
		{"native sidecar counts as injected", pod("shop", nil, nil, nativeProxy), enabled, false, true, "namespace.sidecar-injector.istio.io"},
		{"istio.io/rev on the namespace", pod("shop", nil, nil), rev, true, true, "rev.namespace.sidecar-injector.istio.io"},
		{"istio-injection wins over istio.io/rev", pod("shop", nil, nil), map[string]string{NamespaceLabel: "disabled", RevisionLabel: "canary"}, false, false, "no injector webhook selects"},
		{"istio-injection with another value selects nothing", pod("shop", nil, nil), map[string]string{NamespaceLabel: "true"}, false, false, "no injector webhook selects"},
		{"unlabelled namespace", pod("shop", nil, nil), nil, false, false, "no injector webhook selects"},
		// The pod's own say: the webhooks' object selectors, then the
		// injector's own reading (label over annotation, "true" and
		// "false" only).
		{"pod label false: no webhook", pod("shop", inject("false"), nil), enabled, false, false, "no injector webhook selects"},
		{"pod annotation false: the injector skips it", pod("shop", nil, inject("false")), enabled, false, false, "annotation sidecar.istio.io/inject=false"},
		{"the label wins over the annotation", pod("shop", inject("true"), inject("false")), enabled, true, true, "label sidecar.istio.io/inject=true"},
		{"pod label true in an unlabelled namespace", pod("shop", inject("true"), nil), nil, true, true, "webhook object.sidecar-injector.istio.io"},
		{"pod annotation true alone selects nothing", pod("shop", nil, inject("true")), nil, false, false, "no injector webhook selects"},
		{"pod label true in a disabled namespace", pod("shop", inject("true"), nil), disabled, false, false, "no injector webhook selects"},
		{"pod label istio.io/rev", pod("shop", map[string]string{RevisionLabel: "canary"}, nil), nil, true, true, "rev.object.sidecar-injector.istio.io"},
		// Istio accepts only "true" and "false": any other value is no
		// opt-out, the policy decides (enabled in the chart).
		{"label False is no opt-out", pod("shop", inject("False"), nil), enabled, true, true, "neither true nor false"},
		{"label no is no opt-out", pod("shop", inject("no"), nil), enabled, true, true, "neither true nor false"},
		{"annotation off is no opt-out", pod("shop", nil, map[string]string{InjectAnnotation: "off"}), enabled, true, true, "neither true nor false"},
		// Never injected.
		{"host network", pod("shop", nil, nil, hostNet), enabled, false, false, "host network"},
		{"kube-system", pod("kube-system", nil, nil), enabled, false, false, "never injected"},
		{"kube-node-lease", pod("kube-node-lease", nil, nil), enabled, false, false, "never injected"},
		{"an excluded namespace", pod("batch", nil, nil), enabled, false, false, "excluded"},
		{"injected but not selected is no miss", pod("shop", nil, nil, withProxy), nil, false, false, "no injector webhook selects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Of(tc.pod, tc.ns, []string{"batch"}, ChartView("test"))
			if v.Missed() != tc.missed || v.Expected != tc.expected || !strings.Contains(v.Why, tc.why) {
				t.Errorf("Of = %+v (missed %v); want missed %v, expected %v, why containing %q", v, v.Missed(), tc.missed, tc.expected, tc.why)
			}
			if tc.missed && !strings.HasPrefix(v.String(), "missed injection: ") {
				t.Errorf("String() = %q", v.String())
			}
		})
	}
}

// The cluster's own injectors decide: a revision whose webhooks are not
// installed injects nothing, and each revision's policy and selectors
// apply to the pods its webhooks select.
func TestOfWithTheClustersInjectors(t *testing.T) {
	revSel := func(rev string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{RevisionLabel: rev}}
	}
	view := View{From: "test", Injectors: []Injector{
		{Revision: "canary", Webhooks: []Webhook{{Name: "rev.namespace." + WebhookSuffix, NamespaceSelector: revSel("canary")}}, Config: ChartConfig},
		{Revision: "opt-in", Webhooks: []Webhook{{Name: "rev.namespace." + WebhookSuffix, NamespaceSelector: revSel("opt-in")}},
			Config: Config{Policy: PolicyDisabled, AlwaysInjectSelector: []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "web"}}}}},
	}}
	pod := func(labels map[string]string) *kube.Pod {
		return &kube.Pod{Metadata: kube.ObjectMeta{Name: "p", Namespace: "shop", Labels: labels}}
	}
	for _, tc := range []struct {
		name     string
		nsRev    string
		labels   map[string]string
		expected bool
		why      string
	}{
		{"an installed revision", "canary", nil, true, "revision canary"},
		{"a revision with no webhook", "stable", nil, false, "no injector webhook selects"},
		{"a revision whose policy is disabled", "opt-in", nil, false, "policy is disabled"},
		{"its alwaysInjectSelector", "opt-in", map[string]string{"app": "web"}, true, "alwaysInjectSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Of(pod(tc.labels), map[string]string{RevisionLabel: tc.nsRev}, nil, view)
			if v.Expected != tc.expected || !strings.Contains(v.Why, tc.why) {
				t.Errorf("Of = %+v; want expected %v, why containing %q", v, tc.expected, tc.why)
			}
		})
	}
}
