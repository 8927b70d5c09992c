package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// TestDeploymentsImage: deployments/ runs the image `make image` writes,
// and an overlay's images: entry replaces it.
func TestDeploymentsImage(t *testing.T) {
	makeImage := makefileVar(t, "IMAGE")
	out, err := exec.Command(kubectl(t), "kustomize", "../../deployments").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize deployments: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "image: "+makeImage+"\n") {
		t.Errorf("deployments/ does not run %s, the image make image writes:\n%s", makeImage, out)
	}
	// Kustomize takes a base only by a relative path.
	overlay := t.TempDir()
	abs, err := filepath.Abs("../../deployments")
	if err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(overlay, abs)
	if err != nil {
		t.Fatal(err)
	}
	kust := "resources:\n- " + base + "\nimages:\n- name: localhost/istio-cni/install-cni\n  newName: registry.example/mesh/install-cni\n  newTag: v9\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(kubectl(t), "kustomize", overlay).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize overlay: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "image: registry.example/mesh/install-cni:v9\n") || strings.Contains(string(out), makeImage) {
		t.Errorf("the overlay did not replace the image:\n%s", out)
	}
}

// TestDeploymentsApply: `kubectl apply -k deployments/` is accepted by a
// real API server: the namespace comes before what lives in it, and the
// settings' ConfigMap, named by kustomize with their hash, is the one the
// DaemonSet reads.
func TestDeploymentsApply(t *testing.T) {
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := env.api.Kubeconfig(admin, cluster.AdminToken); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl(t), "--kubeconfig", admin, "apply", "-k", "../../deployments").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k deployments: %v\n%s", err, out)
	}
	objects := 0
	for line := range strings.Lines(string(out)) {
		if strings.HasSuffix(line, " created\n") || strings.HasSuffix(line, " configured\n") || strings.HasSuffix(line, " unchanged\n") {
			objects++
		}
	}
	// The namespace, 2 ServiceAccounts, 6 RBAC objects, 2 admission
	// policies and their bindings, the ConfigMap, the quota, the DaemonSet.
	if got := objects; got != 16 {
		t.Errorf("%d objects applied, want 16:\n%s", got, out)
	}
	name, err := exec.Command(kubectl(t), "--kubeconfig", admin, "-n", "istio-cni", "get", "daemonset/istio-cni-node",
		"-o", "jsonpath={.spec.template.spec.containers[0].envFrom[0].configMapRef.name}").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(name), "istio-cni-config-") {
		t.Fatalf("the DaemonSet's settings: %v %q, want a hashed istio-cni-config", err, name)
	}
	if out, err := exec.Command(kubectl(t), "--kubeconfig", admin, "-n", "istio-cni", "get", "configmap", string(name)).CombinedOutput(); err != nil {
		t.Errorf("the DaemonSet reads ConfigMap %s: %v\n%s", name, err, out)
	}
}

// makefileVar reads `NAME := value` from the repository's Makefile.
func makefileVar(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+" := "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("Makefile has no %s", name)
	return ""
}

func kubectl(t *testing.T) string {
	t.Helper()
	path, err := cluster.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	return path
}
