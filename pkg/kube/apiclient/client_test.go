package apiclient

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

const testToken = "plugin-token"

// serve starts a TLS API stand-in and a client configured for it through a
// kubeconfig file, as the plugin gets one.
func serve(t *testing.T, tm kube.Timeouts, h http.HandlerFunc) (*Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
			http.Error(w, "bad token "+got, http.StatusUnauthorized)
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL, base64.StdEncoding.EncodeToString(ca), testToken)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(path, tm)
	if err != nil {
		t.Fatal(err)
	}
	c.sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	return c, &calls
}

var fast = kube.Timeouts{Attempt: 200 * time.Millisecond, Total: time.Second}

func TestGetPod(t *testing.T) {
	c, calls := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/team-a/pods/web-1" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"kind":"Pod","metadata":{"name":"web-1","namespace":"team-a","annotations":{"a":"b"}},
			"spec":{"containers":[{"name":"istio-proxy","securityContext":{"runAsUser":1000}}]}}`)
	})
	pod, err := c.GetPod(context.Background(), "team-a", "web-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Metadata.Name != "web-1" || pod.Metadata.Annotations["a"] != "b" ||
		*pod.Spec.Containers[0].SecurityContext.RunAsUser != 1000 || calls.Load() != 1 {
		t.Errorf("decoded %+v after %d calls", pod, calls.Load())
	}
}

func TestGetPodErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		kind      kube.ErrorKind
		wantCalls int32
	}{
		{"not found, confirmed by a quorum read", http.StatusNotFound, kube.NotFound, 2},
		{"forbidden", http.StatusForbidden, kube.Denied, 1},
		{"bad request", http.StatusBadRequest, kube.BadResponse, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, calls := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, `{"kind":"Status","message":"the server says no"}`)
			})
			_, err := c.GetPod(context.Background(), "ns", "p", "uid-1")
			var apiErr *kube.APIError
			if !errors.As(err, &apiErr) || apiErr.Kind != tc.kind || apiErr.Pod != "ns/p" {
				t.Fatalf("err = %#v, want kind %d for ns/p", err, tc.kind)
			}
			if calls.Load() != tc.wantCalls {
				t.Errorf("%d calls, want %d (no retry)", calls.Load(), tc.wantCalls)
			}
		})
	}
}

// TestGetPodCacheLag: a pod the watch cache does not have yet is read from
// etcd before anyone calls it missing.
func TestGetPodCacheLag(t *testing.T) {
	c, calls := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("resourceVersion") == "0" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"metadata":{"name":"p","namespace":"ns","uid":"uid-1"},"spec":{"containers":[]}}`)
	})
	if _, err := c.GetPod(context.Background(), "ns", "p", "uid-1"); err != nil || calls.Load() != 2 {
		t.Fatalf("err %v after %d calls, want the quorum read to find the pod", err, calls.Load())
	}
}

// TestGetPodStaleNamesake: the cache still holds the previous pod of the
// same name (a recreated StatefulSet pod): the quorum read decides.
func TestGetPodStaleNamesake(t *testing.T) {
	for _, tc := range []struct {
		quorumUID string
		wantErr   bool
	}{{"uid-new", false}, {"uid-old", true}} {
		var quorum atomic.Int32
		c, _ := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
			uid := "uid-old"
			if r.URL.Query().Get("resourceVersion") != "0" {
				quorum.Add(1)
				uid = tc.quorumUID
			}
			fmt.Fprintf(w, `{"metadata":{"name":"p","namespace":"ns","uid":%q},"spec":{"containers":[]}}`, uid)
		})
		pod, err := c.GetPod(context.Background(), "ns", "p", "uid-new")
		var apiErr *kube.APIError
		switch {
		case tc.wantErr && (!errors.As(err, &apiErr) || apiErr.Kind != kube.NotFound || !strings.Contains(err.Error(), "uid-new")):
			t.Errorf("etcd has only the old pod: err = %v, want kube.NotFound naming the uid", err)
		case !tc.wantErr && (err != nil || pod.Metadata.UID != "uid-new"):
			t.Errorf("etcd has the new pod: got %v, %v", pod, err)
		case quorum.Load() != 1:
			t.Errorf("%d quorum reads, want 1", quorum.Load())
		}
	}
}

// TestGetPodWithoutUIDReadsQuorum: with no uid to check a cached answer
// against, only etcd is trusted.
func TestGetPodWithoutUIDReadsQuorum(t *testing.T) {
	c, _ := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			t.Errorf("query %q, want a quorum read", r.URL.RawQuery)
		}
		fmt.Fprint(w, `{"metadata":{"name":"p","namespace":"ns"},"spec":{"containers":[]}}`)
	})
	if _, err := c.GetPod(context.Background(), "ns", "p", ""); err != nil {
		t.Fatal(err)
	}
}

func TestGetPodRetriesUntilAnswer(t *testing.T) {
	var n atomic.Int32
	c, calls := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			http.Error(w, "etcd leader changed", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"metadata":{"name":"p","namespace":"ns","uid":"uid-1"},"spec":{"containers":[]}}`)
	})
	if _, err := c.GetPod(context.Background(), "ns", "p", "uid-1"); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d calls, want 3", calls.Load())
	}
}

func TestGetPodGivesUpWithinBudget(t *testing.T) {
	// Every attempt hangs until its own timeout; the total budget ends it.
	c, calls := serve(t, kube.Timeouts{Attempt: 100 * time.Millisecond, Total: 450 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c.sleep = sleepCtx
	_, err := c.GetPod(context.Background(), "ns", "p", "uid-1")
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) || apiErr.Kind != kube.Unavailable {
		t.Fatalf("err = %v, want kube.Unavailable", err)
	}
	// Under load an attempt can time out before its request reaches the
	// server (the TLS handshake alone), so the server may count fewer.
	if n := int(calls.Load()); apiErr.Attempts < 2 || n < 1 || n > apiErr.Attempts {
		t.Errorf("%d calls, %d attempts reported: each attempt must time out on its own and be retried", n, apiErr.Attempts)
	}
}

func TestGetPodUnreachable(t *testing.T) {
	c, _ := serve(t, fast, func(w http.ResponseWriter, r *http.Request) {})
	c.host = "https://127.0.0.1:1" // nothing listens on port 1
	_, err := c.GetPod(context.Background(), "ns", "p", "uid-1")
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) || apiErr.Kind != kube.Unavailable || apiErr.Attempts < 2 {
		t.Fatalf("err = %v, want kube.Unavailable after retries", err)
	}
}

func TestNewClientBadKubeconfig(t *testing.T) {
	if _, err := NewClient(filepath.Join(t.TempDir(), "missing"), fast); err == nil {
		t.Error("a missing kubeconfig must fail")
	}
}

// TestGetPodBackoff: waits double from 100ms and stop growing at 2s.
func TestGetPodBackoff(t *testing.T) {
	c, _ := serve(t, kube.Timeouts{Attempt: time.Second, Total: time.Minute}, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusTooManyRequests)
	})
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		if waits = append(waits, d); len(waits) == 7 {
			return context.DeadlineExceeded
		}
		return nil
	}
	_, err := c.GetPod(context.Background(), "ns", "p", "")
	var apiErr *kube.APIError
	if !errors.As(err, &apiErr) || apiErr.Kind != kube.Unavailable || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("err = %v, want kube.Unavailable with the last API error", err)
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
}
