package chart

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// apiResource is one resource a fake API server's discovery lists.
type apiResource struct {
	kind, name string
	namespaced bool
}

// discovery is what the charts render, by group/version ("" for core):
// enough for helm to map every object and look for it.
var discovery = map[string][]apiResource{
	"v1": {{"Namespace", "namespaces", false}, {"ServiceAccount", "serviceaccounts", true}, {"ConfigMap", "configmaps", true},
		{"ResourceQuota", "resourcequotas", true}, {"Secret", "secrets", true}},
	"apps/v1": {{"DaemonSet", "daemonsets", true}},
	"rbac.authorization.k8s.io/v1": {{"ClusterRole", "clusterroles", false}, {"ClusterRoleBinding", "clusterrolebindings", false},
		{"Role", "roles", true}, {"RoleBinding", "rolebindings", true}},
	"admissionregistration.k8s.io/v1": {{"ValidatingAdmissionPolicy", "validatingadmissionpolicies", false},
		{"ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", false}},
	"k8s.cni.cncf.io/v1": {{"NetworkAttachmentDefinition", "network-attachment-definitions", true}},
}

// fakeAPIServer answers discovery as a cluster at gitVersion would, and
// 404 to everything else (no object exists yet). helm reads
// .Capabilities.KubeVersion from /version only when it talks to a server:
// --kube-version drops a "-gke.N" suffix.
func fakeAPIServer(t *testing.T, gitVersion string) (kubeconfig string) {
	t.Helper()
	mux := http.NewServeMux()
	reply := func(path string, body any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(body)
		})
	}
	minor := strings.Split(strings.TrimPrefix(gitVersion, "v"), ".")[1]
	reply("/version", map[string]string{"major": "1", "minor": minor, "gitVersion": gitVersion, "platform": "linux/amd64"})
	reply("/api", map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	var groups []map[string]any
	for gv, resources := range discovery {
		list := []map[string]any{}
		for _, r := range resources {
			list = append(list, map[string]any{"name": r.name, "kind": r.kind, "namespaced": r.namespaced, "singularName": "",
				"verbs": []string{"get", "list", "create", "update", "patch", "delete"}})
		}
		body := map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}
		if gv == "v1" {
			reply("/api/v1", body)
			continue
		}
		reply("/apis/"+gv, body)
		group := strings.Split(gv, "/")[0]
		version := map[string]string{"groupVersion": gv, "version": strings.Split(gv, "/")[1]}
		groups = append(groups, map[string]any{"name": group, "versions": []any{version}, "preferredVersion": version})
	}
	reply("/apis", map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestGKEDetectedFromTheServer: as upstream's chart, a cluster whose
// version says -gke gets the CNI binaries in /home/kubernetes/bin (GKE's
// /opt/cni/bin is read-only) when cniBinDir is empty. This chart's
// default is empty; upstream's values file sets /opt/cni/bin, so with it
// neither chart detects, and with cniBinDir cleared (as upstream's gke
// profile does) both do: both charts render against the same server.
func TestGKEDetectedFromTheServer(t *testing.T) {
	m, upChart, valuesFile := upstreamChart(t)
	binDir := func(chart, gitVersion string, args ...string) string {
		t.Helper()
		kc := fakeAPIServer(t, gitVersion)
		out, err := run(t, tool(t, cluster.Helm), append([]string{"template", "istio-cni", chart, "--namespace", "istio-cni",
			"--validate", "--disable-openapi-validation", "--kubeconfig", kc}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return hostPaths(daemonSet(objects(t, out)))["cni-bin-dir"]
	}
	const gke, plain = "v1.33.5-gke.1080000", "v1.33.5"
	for _, tc := range []struct {
		version  string
		args     []string
		want     string
		upstream bool // upstream's chart, given the same values, agrees
	}{
		{gke, nil, "/home/kubernetes/bin", false},
		{plain, nil, "/opt/cni/bin", false},
		{gke, []string{"--set", "cniBinDir=/opt/cni/bin"}, "/opt/cni/bin", true},
		{gke, []string{"-f", valuesFile}, "/opt/cni/bin", true},
		{gke, []string{"-f", valuesFile, "--set", "cniBinDir="}, "/home/kubernetes/bin", true},
		{plain, []string{"-f", valuesFile, "--set", "cniBinDir="}, "/opt/cni/bin", true},
		{gke, []string{"-f", valuesFile, "-f", filepath.Join(m, "helm-profiles", "platform-gke.yaml")}, "/home/kubernetes/bin", true},
	} {
		if got := binDir(chartDir(t), tc.version, append(tc.args, ourImage...)...); got != tc.want {
			t.Errorf("server %s %v: cni-bin-dir %q, want %q", tc.version, tc.args, got, tc.want)
		}
		if !tc.upstream {
			continue
		}
		if up := binDir(upChart, tc.version, tc.args...); up != tc.want {
			t.Errorf("server %s %v: upstream's chart renders cni-bin-dir %q, this test wants %q", tc.version, tc.args, up, tc.want)
		}
	}
}
