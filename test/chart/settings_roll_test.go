package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// TestSettingsRollTheAgents: the agent reads its settings once, at start,
// so every change of them must change the DaemonSet's pod template, which
// rolls the agents by the DaemonSet's updateStrategy: through Helm (the
// settings' checksum annotation) and through kustomize (the ConfigMap's
// hashed name, whether an overlay merges a literal or patches the data);
// a change of something else leaves the settings' part of the template as
// it was.
func TestSettingsRollTheAgents(t *testing.T) {
	t.Run("helm", func(t *testing.T) {
		checksum := func(set ...string) string {
			t.Helper()
			out, err := helmTemplateOut(t, append([]string{"istio-cni", chartDir(t), "--namespace", "istio-cni"}, setArgs(set...)...)...)
			if err != nil {
				t.Fatal(err)
			}
			ds := objects(t, out)["DaemonSet istio-cni/istio-cni-node"]
			a, _ := ds["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
			sum, _ := a[checksumAnnotation].(string)
			if len(sum) != 64 {
				t.Fatalf("%v: pod template annotation %s %q, want a sha256", set, checksumAnnotation, sum)
			}
			return sum
		}
		base := checksum()
		if again := checksum(); again != base {
			t.Fatalf("two renders of the same values: %s and %s", base, again)
		}
		for _, set := range [][]string{
			{"logging.level=debug"},
			{"excludeNamespaces={kube-system,batch}"},
			{"missedInjection.mode=restart"},
			{"repair.repairPods=false", "repair.labelPods=true"},
			{"env.AUDIT_INTERVAL=10s"},
			{"taint.name=example.com/cni-not-ready"},
			{"global.istioNamespace=istio-control"},
		} {
			if got := checksum(set...); got == base {
				t.Errorf("%v: the checksum did not change: the agents would not restart", set)
			}
		}
		if got := checksum("resources.limits.cpu=1"); got != base {
			t.Errorf("a resources change changed the settings' checksum")
		}
	})

	t.Run("kustomize", func(t *testing.T) {
		ref := func(kustomization string) (string, map[string]any) {
			t.Helper()
			dir := t.TempDir()
			rel, err := filepath.Rel(dir, deployments(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(fmt.Sprintf(kustomization, rel)), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, tool(t, cluster.Kubectl), "kustomize", dir)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, out)
			r, err := settingsRef(objs["DaemonSet istio-cni/istio-cni-node"])
			if err != nil {
				t.Fatal(err)
			}
			name, _ := r["name"].(string)
			cm, ok := objs["ConfigMap istio-cni/"+name]
			if !ok || !settingsHash.MatchString(name) {
				t.Fatalf("the DaemonSet reads ConfigMap %q: not rendered, or not a hashed name", name)
			}
			data, _ := cm["data"].(map[string]any)
			return name, data
		}
		base, data := ref("resources: [%s]\n")
		if data["LOG_LEVEL"] != "info" {
			t.Fatalf("the default LOG_LEVEL %v", data["LOG_LEVEL"])
		}
		merged, data := ref(`resources: [%s]
configMapGenerator:
- name: istio-cni-config
  namespace: istio-cni
  behavior: merge
  literals: [LOG_LEVEL=debug]
`)
		if merged == base || data["LOG_LEVEL"] != "debug" {
			t.Errorf("an overlay's merged literal: ConfigMap %s (LOG_LEVEL %v), the default's %s", merged, data["LOG_LEVEL"], base)
		}
		patched, data := ref(`resources: [%s]
patches:
- target: {kind: ConfigMap, name: istio-cni-config}
  patch: |-
    - op: replace
      path: /data/EXCLUDE_NAMESPACES
      value: kube-system,batch
`)
		if patched == base || data["EXCLUDE_NAMESPACES"] != "kube-system,batch" {
			t.Errorf("an overlay's patch: ConfigMap %s (EXCLUDE_NAMESPACES %v), the default's %s", patched, data["EXCLUDE_NAMESPACES"], base)
		}
	})
}
