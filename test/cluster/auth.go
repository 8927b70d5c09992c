package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// Static bearer tokens the API server accepts (--token-auth-file). Any other
// token gets 401.
const (
	// AdminToken authenticates user "admin" in group system:masters.
	AdminToken = "istio-cni-test-admin-token"
	// PluginToken authenticates PluginUser, which may only get pods.
	PluginToken = "istio-cni-test-plugin-token"
	// NobodyToken authenticates user "nobody", which has no RBAC: 403.
	NobodyToken = "istio-cni-test-nobody-token"
)

// PluginUser is the user PluginToken authenticates as.
const PluginUser = "istio-cni-plugin"

// pluginRBACName names the user's ClusterRole and binding; it differs from
// deployments/' objects, which tests also apply to this server.
const pluginRBACName = "istio-cni-test-plugin-user"

// writeTokenFile writes the static token file: token,user,uid,"groups".
func writeTokenFile(dir string) (string, error) {
	path := filepath.Join(dir, "tokens.csv")
	data := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n%s,%s,%s\n%s,nobody,nobody\n",
		AdminToken, PluginToken, PluginUser, PluginUser, NobodyToken)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// The plugin's ClusterRole allows exactly what the plugin does: get a pod.
var pluginRBAC = []struct{ path, body string }{
	{"/apis/rbac.authorization.k8s.io/v1/clusterroles", `{
  "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
  "metadata": {"name": "` + pluginRBACName + `"},
  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}`},
	{"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", `{
  "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
  "metadata": {"name": "` + pluginRBACName + `"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "` + pluginRBACName + `"},
  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "` + PluginUser + `"}]}`},
}

// installPluginRBAC creates the plugin's ClusterRole and binding, then waits
// until the RBAC authorizer's cache has them: a get of a missing pod with
// PluginToken answers 404 instead of 403.
func (a *APIServer) installPluginRBAC(ctx context.Context) error {
	for _, obj := range pluginRBAC {
		status, body, err := a.Do(ctx, http.MethodPost, obj.path, []byte(obj.body))
		if err != nil {
			return fmt.Errorf("creating plugin RBAC: %w", err)
		}
		if status != http.StatusCreated {
			return fmt.Errorf("creating plugin RBAC: POST %s: %d %s", obj.path, status, body)
		}
	}
	return poll(ctx, a.apiserv, func(ctx context.Context) error {
		const probe = "/api/v1/namespaces/default/pods/rbac-probe-does-not-exist"
		status, body, err := a.DoAs(ctx, PluginToken, http.MethodGet, probe, nil)
		if err != nil {
			return err
		}
		if status != http.StatusNotFound {
			return fmt.Errorf("plugin token not yet authorized: GET %s: %d %s", probe, status, body)
		}
		return nil
	})
}
