package chart

import (
	"path"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// installDryRun runs `helm install --dry-run=client` (helm template
// renders no NOTES.txt) and returns the objects it would create and the
// NOTES it would print. helm install asks a server for its version, even
// so: a fake one answers.
func installDryRun(t *testing.T, set ...string) (objs map[string]map[string]any, notes string) {
	t.Helper()
	out, err := run(t, tool(t, cluster.Helm), append([]string{"install", "istio-cni", chartDir(t), "--namespace", "istio-cni",
		"--dry-run=client", "--disable-openapi-validation", "--kubeconfig", fakeAPIServer(t, nodeTestsKubernetes(t))}, setArgs(set...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(out, "\nMANIFEST:\n")
	manifest, notes, ok2 := strings.Cut(rest, "\nNOTES:\n")
	if !ok || !ok2 {
		t.Fatalf("helm install --dry-run printed no MANIFEST or NOTES:\n%s", out)
	}
	return objects(t, manifest), notes
}

// notesLine is the NOTES line that starts with label, trimmed.
func notesLine(t *testing.T, notes, label string) string {
	t.Helper()
	for l := range strings.Lines(notes) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, label) {
			return l
		}
	}
	t.Fatalf("no %q line in the NOTES:\n%s", label, notes)
	return ""
}

// TestNotesNameEachConfig: what helm install prints says which file is the
// primary CNI's and which istio-cni writes, as the agent's ConfigMap (its
// mode, chaining and names) and the DaemonSet's config directory say, in
// every mode: chained with its own conflist, the primary named or not;
// inserted into the primary's file; standalone for Multus.
func TestNotesNameEachConfig(t *testing.T) {
	for _, set := range [][]string{nil, {"cniConfFileName=10-calico.conflist", "istioOwnedCNIConfigFileName=01-istio-cni.conflist"},
		{"istioOwnedCNIConfig=false"}, {"env.MODE=inplace"}, {"global.platform=openshift"}, {"global.platform=k3s"}} {
		objs, notes := installDryRun(t, set...)
		d := configData(objs)
		dir := hostPaths(daemonSet(objs))["cni-net-dir"]
		own := path.Join(dir, d["OWNED_CONFIG_NAME"].(string))
		primary, ownLine := notesLine(t, notes, "primary CNI's config:"), notesLine(t, notes, "istio-cni's config:")
		if strings.Contains(primary, own) {
			t.Errorf("--set %v: istio-cni's own file given as the primary's: %s", set, primary)
		}
		switch {
		case d["CHAINED_CNI_PLUGIN"] == "false":
			if !strings.Contains(ownLine, own) || !strings.Contains(primary, "none") {
				t.Errorf("--set %v: standalone, want %s as istio-cni's and no primary:\n%s", set, own, notes)
			}
		case d["MODE"] == "inplace":
			if strings.Contains(ownLine, own) || !strings.Contains(primary, "first valid config in "+dir) ||
				!strings.Contains(primary, "istio-cni inserts its entry") {
				t.Errorf("--set %v: inplace, want istio-cni's entry in the first valid config in %s, no file of its own:\n%s", set, dir, notes)
			}
		default:
			want := "the first valid config in " + dir
			if name, ok := d["PRIMARY_CONFIG_NAME"].(string); ok {
				want = path.Join(dir, name)
			}
			if !strings.Contains(ownLine, own) || !strings.Contains(primary, want) {
				t.Errorf("--set %v: want %s as istio-cni's own conflist, %s as the primary's:\n%s", set, own, want, notes)
			}
		}
	}
}
