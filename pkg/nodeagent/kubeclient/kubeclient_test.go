package kubeclient

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
)

// request is what the API server saw of one request.
type request struct {
	method, path, query, userAgent, accept, contentType string
}

// apiServer answers every request with obj as JSON and records it.
func apiServer(t *testing.T, obj any) (*rest.Config, func() []request) {
	t.Helper()
	var mu sync.Mutex
	var seen []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.Path, r.URL.RawQuery, r.UserAgent(), r.Header.Get("Accept"), r.Header.Get("Content-Type")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), seen...)
	}
}

// The agent's requests are a generated client's: its User-Agent (the API
// server names the agent's field manager after it), protobuf preferred,
// the options as query parameters, each kind at its group's path.
func TestRequestsAsClientGoSendsThem(t *testing.T) {
	rc, seen := apiServer(t, &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}})
	c, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", "node-a").String()
	if _, err := c.Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: sel, ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Leases("istio-cni").Get(t.Context(), "budget", metav1.GetOptions{})
	_, _ = c.MutatingWebhookConfigurations().List(t.Context(), metav1.ListOptions{Limit: 1})
	got := seen()
	if len(got) != 3 {
		t.Fatalf("requests: %+v", got)
	}
	if want := rest.DefaultKubernetesUserAgent(); got[0].userAgent != want {
		t.Errorf("User-Agent %q, want %q", got[0].userAgent, want)
	}
	if !strings.HasPrefix(got[0].accept, "application/vnd.kubernetes.protobuf") {
		t.Errorf("Accept %q: protobuf first, as the generated clients ask", got[0].accept)
	}
	if got[0].path != "/api/v1/pods" || !strings.Contains(got[0].query, "fieldSelector=spec.nodeName%3Dnode-a") ||
		!strings.Contains(got[0].query, "resourceVersion=0") {
		t.Errorf("pods list: %s?%s", got[0].path, got[0].query)
	}
	if got[1].path != "/apis/coordination.k8s.io/v1/namespaces/istio-cni/leases/budget" {
		t.Errorf("lease get: %s", got[1].path)
	}
	if got[2].path != "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations" || got[2].query != "limit=1" {
		t.Errorf("webhooks list: %s?%s", got[2].path, got[2].query)
	}
}

// Events go into their own namespace, whatever the sink was made for.
func TestEventSinkWritesInTheEventsNamespace(t *testing.T) {
	rc, seen := apiServer(t, &corev1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}})
	c, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	sink := EventSink(c)
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p.1", Namespace: "shop"}}
	if _, err := sink.Create(e); err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Patch(e, []byte(`{"count":2}`)); err != nil {
		t.Fatal(err)
	}
	got := seen()
	if len(got) != 2 || got[0].method != http.MethodPost || got[0].path != "/api/v1/namespaces/shop/events" ||
		got[1].method != http.MethodPatch || got[1].path != "/api/v1/namespaces/shop/events/p.1" ||
		got[1].contentType != "application/strategic-merge-patch+json" {
		t.Errorf("requests: %+v", got)
	}
}
