package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/test/poll"
)

// TestDeploymentsRBAC applies deployments/ to a real API server and checks
// that its RBAC grants exactly what each identity uses: the plugin's minted
// token may get pods and nothing else; the installer may get its DaemonSet,
// mint the plugin's token, read pods (the audit), write Events and patch
// nodes (the taint; see TestNodeTaintPolicy for what the policy leaves of
// that), and nothing else.
func TestDeploymentsRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	applyDeployments(t, ctx)
	// The installer's identity: a token for its ServiceAccount bound to its
	// pod on a node, as kubelet projects it.
	installerToken, _ := agentToken(t, ctx, "rbac-node")
	mint, err := install.PluginTokenMinter(agentClient(t, installerToken), "istio-cni", "istio-cni-plugin", install.MinPluginTokenTTL, "rbac-node")
	if err != nil {
		t.Fatal(err)
	}
	var pluginToken string
	var expires time.Time
	// The admission policy may lag the apply.
	poll.Until(t, 20*time.Second, "the installer mints the plugin's token", func() (bool, string) {
		pluginToken, expires, err = mint(ctx)
		return err == nil, errString(err)
	})
	if ttl := time.Until(expires); ttl < 9*time.Minute || ttl > 11*time.Minute {
		t.Errorf("minted token lives %v, want the 10m asked for", ttl)
	}
	// Eventually: the RBAC authorizer's cache may lag the apply.
	for _, c := range []struct {
		who, token, method, path string
		allowed                  bool
	}{
		{"plugin", pluginToken, "GET", "/api/v1/namespaces/default/pods/any", true},
		{"plugin", pluginToken, "GET", "/api/v1/namespaces/default/pods", false},
		{"plugin", pluginToken, "GET", "/api/v1/namespaces/istio-cni/secrets/any", false},
		{"plugin", pluginToken, "GET", "/apis/apps/v1/namespaces/istio-cni/daemonsets/istio-cni-node", false},
		{"plugin", pluginToken, "POST", "/api/v1/namespaces/istio-cni/serviceaccounts/istio-cni-plugin/token", false},
		{"installer", installerToken, "GET", "/apis/apps/v1/namespaces/istio-cni/daemonsets/istio-cni-node", true},
		{"installer", installerToken, "GET", "/apis/apps/v1/namespaces/istio-cni/daemonsets", false},
		// The uninstall check's watches, by name.
		{"installer", installerToken, "GET", "/apis/apps/v1/namespaces/istio-cni/daemonsets?fieldSelector=metadata.name%3Distio-cni-node&watch=true&timeoutSeconds=1", true},
		{"installer", installerToken, "GET", "/api/v1/namespaces/istio-cni", true},
		{"installer", installerToken, "GET", "/api/v1/namespaces?fieldSelector=metadata.name%3Distio-cni&watch=true&timeoutSeconds=1", true},
		// Every namespace's labels: which select sidecar injection.
		{"installer", installerToken, "GET", "/api/v1/namespaces/default", true},
		{"installer", installerToken, "GET", "/api/v1/namespaces?watch=true&timeoutSeconds=1", true},
		{"installer", installerToken, "PATCH", "/api/v1/namespaces/default", false},
		{"installer", installerToken, "GET", "/api/v1/namespaces/istio-cni/serviceaccounts/istio-cni", true},
		{"installer", installerToken, "GET", "/api/v1/namespaces/istio-cni/serviceaccounts/istio-cni-plugin", false},
		{"installer", installerToken, "DELETE", "/api/v1/namespaces/istio-cni", false},
		{"installer", installerToken, "GET", "/api/v1/namespaces/default/pods/any", true},
		{"installer", installerToken, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", true},
		{"installer", installerToken, "DELETE", "/api/v1/namespaces/default/pods/any", false},
		{"installer", installerToken, "GET", "/api/v1/namespaces/default/secrets/any", false},
		{"installer", installerToken, "DELETE", "/api/v1/nodes/any", false},
		{"installer", installerToken, "GET", "/api/v1/nodes/any", true},
		{"installer", installerToken, "POST", "/api/v1/namespaces/istio-cni/serviceaccounts/istio-cni/token", false},
		{"installer", installerToken, "POST", "/api/v1/namespaces/istio-cni/serviceaccounts/default/token", false},
	} {
		var body []byte
		if c.method == "POST" {
			body = []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`)
		}
		// Allowed: served, or 404 for an object that does not exist.
		// Denied: 403. Anything else (401: a bad token) is neither.
		verdict := func(status int) bool {
			if c.allowed {
				return status < 300 || status == http.StatusNotFound
			}
			return status == http.StatusForbidden
		}
		// RBAC caches may lag the objects just applied: poll for the verdict.
		var status int
		_ = poll.Wait(10*time.Second, "verdict", func() (bool, string) {
			if status, _, err = env.api.DoAs(ctx, c.token, c.method, c.path, body); err != nil {
				t.Fatal(err)
			}
			return verdict(status), ""
		})
		if !verdict(status) {
			t.Errorf("%s %s %s: %d, want allowed=%v", c.who, c.method, c.path, status, c.allowed)
		}
	}
}

func restConfig(token string) *rest.Config {
	return &rest.Config{Host: env.api.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: env.api.CAFile}}
}

// agentClient is the agent's own API client (pkg/nodeagent/kubeclient)
// with token.
func agentClient(t *testing.T, token string) kubeclient.Interface {
	t.Helper()
	c, err := kubeclient.New(restConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clientFor(t *testing.T, token string) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(restConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
