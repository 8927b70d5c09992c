package integration

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/install"
	"istio-cni.local/istio-cni/test/cluster"
)

const daemonSet = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"istio-cni-node","namespace":"team-a",
 "finalizers":["test.istio-cni.local/hold"]},
 "spec":{"selector":{"matchLabels":{"app":"istio-cni"}},"template":{"metadata":{"labels":{"app":"istio-cni"}},
 "spec":{"containers":[{"name":"install-cni","image":"istio-cni:test"}]}}}}`

// TestDaemonSetGone: the installer's uninstall check against a real API
// server: present → restart; deleting (a finalizer holds it) → uninstall;
// gone → uninstall.
func TestDaemonSetGone(t *testing.T) {
	ctx := context.Background()
	createPod(t, "team-a", "namespace-anchor", nil, []map[string]any{container("app")}, nil) // creates the namespace
	path := "/apis/apps/v1/namespaces/team-a/daemonsets"
	if status, body, err := env.api.Do(ctx, "POST", path, []byte(daemonSet)); err != nil || status != 201 {
		t.Fatalf("creating the DaemonSet: %d %s %v", status, body, err)
	}
	check, err := install.DaemonSetGone(&rest.Config{
		Host: env.api.URL, BearerToken: cluster.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAFile: env.api.CAFile},
	}, "team-a", "istio-cni-node")
	if err != nil {
		t.Fatal(err)
	}
	want := func(state string, uninstall bool) {
		t.Helper()
		got, err := check(ctx)
		if err != nil || got != uninstall {
			t.Fatalf("%s: uninstall = %v, %v; want %v", state, got, err, uninstall)
		}
	}
	want("present", false)
	if status, _, err := env.api.Do(ctx, "DELETE", path+"/istio-cni-node", nil); err != nil || status >= 300 {
		t.Fatalf("deleting: %d %v", status, err)
	}
	want("being deleted", true)
	patch := []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)
	if status, body, err := env.api.Do(ctx, "PATCH", path+"/istio-cni-node", patch); err != nil || status >= 300 {
		t.Fatalf("releasing the finalizer: %d %s %v", status, body, err)
	}
	want("gone", true)
}
