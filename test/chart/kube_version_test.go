package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// nodeTestsKubernetes is the Kubernetes the node tests run: test/kube's
// k8s.io/kubernetes.
func nodeTestsKubernetes(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployments(t), "..", "test", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v1\.\d+\.\d+)\s*$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("test/kube/go.mod requires no k8s.io/kubernetes")
	}
	return string(m[1])
}

// TestKubeVersionRefusesOlderClusters: Chart.yaml's kubeVersion lets the
// chart install only where istio-cni runs: ValidatingAdmissionPolicy v1
// and the container's appArmorProfile need 1.30, plugin tokens bound to
// the Node 1.31 (before, the API server refuses them and no agent gets
// ready). The node tests' Kubernetes installs, and so does a provider's
// build (GKE's -gke.N, a pre-release to semver), which only a server
// reports (--kube-version drops the suffix).
func TestKubeVersionRefusesOlderClusters(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"v1.29.15", false}, {"v1.30.14", false}, {"v1.30.9-gke.1009000", false},
		{"v1.31.0", true}, {"v1.31.1-gke.1146000", true}, {nodeTestsKubernetes(t), true},
	} {
		args := []string{"template", "x", chartDir(t), "--kube-version", tc.version}
		if strings.Contains(tc.version, "-") {
			args = []string{"template", "x", chartDir(t), "--validate", "--disable-openapi-validation", "--kubeconfig", fakeAPIServer(t, tc.version)}
		}
		_, err := run(t, tool(t, cluster.Helm), args...)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "chart requires kubeVersion")) {
			t.Errorf("Kubernetes %s: %v, want accepted %v", tc.version, err, tc.ok)
		}
	}
}
