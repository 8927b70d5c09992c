package nodeagent

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient/clientset"
	"istio-cni.local/istio-cni/test/poll"
)

// The injectors as the cluster has them: each MutatingWebhookConfiguration
// with Istio's injector webhooks is a revision, its configuration read from
// the ConfigMap the chart names for it, in its Service's namespace (or
// ISTIO_NAMESPACE for a URL); other webhooks are not Istio's.
func TestReadInjectors(t *testing.T) {
	revSel := &metav1.LabelSelector{MatchLabels: map[string]string{"istio.io/rev": "canary"}}
	cs := fake.NewClientset(
		&admissionv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-canary", Labels: map[string]string{"istio.io/rev": "canary"}},
			Webhooks: []admissionv1.MutatingWebhook{{Name: "rev.namespace.sidecar-injector.istio.io", NamespaceSelector: revSel,
				ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: "istio-canary", Name: "istiod-canary"}}}},
		},
		&admissionv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector", Labels: map[string]string{"istio.io/rev": "default"}},
			Webhooks: []admissionv1.MutatingWebhook{{Name: "namespace.sidecar-injector.istio.io",
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}}}},
		},
		&admissionv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "someone-else"},
			Webhooks:   []admissionv1.MutatingWebhook{{Name: "defaults.example.com"}},
		},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-canary", Name: "istio-sidecar-injector-canary"},
			Data: map[string]string{"config": "policy: disabled\nalwaysInjectSelector:\n- matchLabels:\n    app: web\ntemplates: {}\n"}},
	)
	view := readInjectors(context.Background(), clientset.Of(cs), "istio-system")
	if len(view.Injectors) != 2 {
		t.Fatalf("%d injectors, want the two of Istio: %+v", len(view.Injectors), view)
	}
	byRev := map[string]injection.Injector{}
	for _, inj := range view.Injectors {
		byRev[inj.Revision] = inj
	}
	canary, def := byRev["canary"], byRev["default"]
	if canary.Config.Policy != injection.PolicyDisabled || len(canary.Config.AlwaysInjectSelector) != 1 || canary.ConfigFrom != "ConfigMap istio-canary/istio-sidecar-injector-canary" {
		t.Errorf("canary: %+v", canary)
	}
	if def.Config.Policy != injection.PolicyEnabled || !strings.Contains(def.ConfigFrom, "istio-system/istio-sidecar-injector does not exist") {
		t.Errorf("default (a URL webhook, no ConfigMap): %+v", def)
	}
	// A pod in a canary namespace: selected, but that revision's policy
	// is disabled and the pod not always injected.
	p := &kube.Pod{Metadata: kube.ObjectMeta{Name: "p", Namespace: "shop"}}
	if v := injection.Of(p, map[string]string{"istio.io/rev": "canary"}, nil, view); v.Expected || !strings.Contains(v.Why, "policy is disabled") {
		t.Errorf("canary pod: %+v", v)
	}

	// Webhooks that cannot be listed: the chart's view, saying why.
	cs.PrependReactor("list", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(admissionv1.Resource("mutatingwebhookconfigurations"), "", nil)
	})
	if view := readInjectors(context.Background(), clientset.Of(cs), "istio-system"); !strings.Contains(view.From, "cannot be listed") || len(view.Injectors) != 1 {
		t.Errorf("forbidden: %+v", view)
	}
}

// Webhooks that cannot be listed at start (the RBAC not there yet, in an
// upgrade): the chart's view meanwhile, then the cluster's once they can.
func TestInjectorsFollowedOnceListable(t *testing.T) {
	cs := fake.NewClientset(&admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-canary", Labels: map[string]string{"istio.io/rev": "canary"}},
		Webhooks: []admissionv1.MutatingWebhook{{Name: "rev.namespace.sidecar-injector.istio.io",
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"istio.io/rev": "canary"}}}},
	})
	var allowed atomic.Bool
	cs.PrependReactor("list", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		if allowed.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(admissionv1.Resource("mutatingwebhookconfigurations"), "", nil)
	})
	r := newInjectorReader(clientset.Of(cs), "istio-system", slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.listRetry = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !r.Start(ctx) {
		t.Fatal("Start gave up")
	}
	if v := r.View(ctx); !strings.Contains(v.From, "cannot be listed") {
		t.Fatalf("forbidden: %+v, want the chart's view", v)
	}
	allowed.Store(true)
	poll.UntilTrue(t, 10*time.Second, "the cluster's webhooks followed", func() bool {
		v := r.View(ctx)
		return len(v.Injectors) == 1 && v.Injectors[0].Revision == "canary"
	})
}
