package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"istio-cni.local/istio-cni/test/cluster"
)

// Upstream istio-cni's users bring its values file and profiles. These
// tests read them from the istio.io/istio module test/upstream pins, never
// from a copy, and render upstream's own chart beside ours.

// upstreamChart is the pinned module's manifests directory, its
// istio-cni chart and that chart's values.yaml.
func upstreamChart(t *testing.T) (manifests, chart, values string) {
	t.Helper()
	dir, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	chart = filepath.Join(dir, "charts", "istio-cni")
	return dir, chart, filepath.Join(chart, "values.yaml")
}

// render runs helm template on chart with args (-f, --set, ...).
func render(t *testing.T, chart string, args ...string) (map[string]map[string]any, error) {
	t.Helper()
	out, err := helmTemplateOut(t, append([]string{"istio-cni", chart, "--namespace", "istio-cni"}, args...)...)
	if err != nil {
		return nil, err
	}
	return objects(t, out), nil
}

// ourImage: a user switching charts points the image at istio-cni's.
var ourImage = []string{"--set", "global.hub=localhost/istio-cni", "--set", "global.tag=0.1.0"}

// podTemplate is a DaemonSet's pod template (podSpec, its spec).
func podTemplate(ds map[string]any) map[string]any {
	return ds["spec"].(map[string]any)["template"].(map[string]any)
}

// sharedMeaning is what both charts' DaemonSets and ConfigMaps say in the
// same terms: the node's paths, scheduling, identity and privileges,
// scrape annotations and resources, and how the config is written.
func sharedMeaning(objs map[string]map[string]any, upstream bool) map[string]any {
	ds := objs["DaemonSet istio-cni/istio-cni-node"]
	spec := podSpec(ds)
	c := spec["containers"].([]any)[0].(map[string]any)
	sc := c["securityContext"].(map[string]any)
	paths := hostPaths(ds)
	netns := paths["netns-dir"]
	if upstream {
		netns = paths["cni-netns-dir"]
	}
	seccomp := sc["seccompProfile"]
	if !upstream {
		if psc, ok := spec["securityContext"].(map[string]any); ok {
			seccomp = psc["seccompProfile"]
		}
	}
	ann := podTemplate(ds)["metadata"].(map[string]any)["annotations"].(map[string]any)
	labels := podTemplate(ds)["metadata"].(map[string]any)["labels"].(map[string]any)
	res, _ := c["resources"].(map[string]any)
	data, _ := objs["ConfigMap istio-cni/istio-cni-config"]["data"].(map[string]any)
	chained := data["CHAINED_CNI_PLUGIN"]
	// Upstream's CNI_CONF_NAME: chained, the primary's file (empty: the
	// first); standalone, the file written. Ours splits the two.
	confName, owned := data["PRIMARY_CONFIG_NAME"], data["MODE"] != "inplace"
	if chained == "false" {
		confName = data["OWNED_CONFIG_NAME"]
	}
	if upstream {
		confName, owned = data["CNI_CONF_NAME"], data["ISTIO_OWNED_CNI_CONFIG"] == "true"
		if chained == "false" {
			owned = true
		}
	}
	if confName == nil {
		confName = ""
	}
	return map[string]any{
		"cniBinDir": paths["cni-bin-dir"], "cniConfDir": paths["cni-net-dir"], "cniNetnsDir": netns,
		"tolerations": spec["tolerations"], "nodeSelector": spec["nodeSelector"], "affinity": spec["affinity"],
		"priorityClassName": spec["priorityClassName"], "terminationGracePeriodSeconds": spec["terminationGracePeriodSeconds"],
		"updateStrategy":  ds["spec"].(map[string]any)["updateStrategy"],
		"imagePullPolicy": c["imagePullPolicy"],
		"runAsUser":       sc["runAsUser"], "runAsGroup": sc["runAsGroup"], "runAsNonRoot": sc["runAsNonRoot"], "privileged": sc["privileged"],
		"seLinuxOptions": sc["seLinuxOptions"], "seccompProfile": seccomp, "appArmorProfile": sc["appArmorProfile"],
		"appArmorAnnotation": ann["container.apparmor.security.beta.kubernetes.io/install-cni"],
		"scrape":             []any{ann["prometheus.io/scrape"], ann["prometheus.io/port"], ann["prometheus.io/path"]},
		"k8s-app":            labels["k8s-app"], "inject": labels["sidecar.istio.io/inject"],
		"requests": res["requests"],
		"chained":  chained, "confName": confName, "ownedConfig": owned,
		"excludeNamespaces": data["EXCLUDE_NAMESPACES"],
		"nativeNftables":    data["NATIVE_NFTABLES"],
	}
}

// profileKeys are what a profile alone (no upstream values file) may
// set; the rest of this chart's defaults differ from upstream's on
// purpose (docs/platforms.md).
var profileKeys = []string{"cniBinDir", "cniConfDir", "cniNetnsDir", "chained", "confName", "seLinuxOptions"}

func compareShared(t *testing.T, what string, ours, upstream map[string]map[string]any, only ...string) {
	t.Helper()
	o, u := sharedMeaning(ours, false), sharedMeaning(upstream, true)
	// Upstream's default seccompProfile {} keeps this chart's
	// RuntimeDefault (Unconfined must be asked for).
	if u["seccompProfile"] == nil {
		delete(u, "seccompProfile")
	}
	// Upstream's gke profile leaves the binaries' directory to detection
	// from the server's version (-gke), which helm template cannot fake;
	// this chart's gke profile names GKE's directory.
	if strings.Contains(what, "gke") {
		delete(u, "cniBinDir")
	}
	var keys []string
	for k := range u {
		if len(only) == 0 || slices.Contains(only, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !reflect.DeepEqual(o[k], u[k]) {
			oj, _ := json.Marshal(o[k])
			uj, _ := json.Marshal(u[k])
			t.Errorf("%s: %s is %s here, %s in upstream's chart", what, k, oj, uj)
		}
	}
}

// TestUpstreamValuesFile: `helm install -f` with upstream's values.yaml
// (its defaults, as `helm show values` prints them), alone and with each
// of upstream's helm-profiles, renders; where both charts share a meaning
// the DaemonSet and ConfigMap say what upstream's say. Upstream's ambient
// profile is refused: istio-cni is sidecar-only.
func TestUpstreamValuesFile(t *testing.T) {
	m, upChart, valuesFile := upstreamChart(t)
	profiles, err := filepath.Glob(filepath.Join(m, "helm-profiles", "*.yaml"))
	if err != nil || len(profiles) < 10 {
		t.Fatalf("upstream's helm-profiles: %v, %v", profiles, err)
	}
	// global.nativeNftables reaches the agent as upstream's does.
	cases := [][]string{{"-f", valuesFile}, {"-f", valuesFile, "--set", "global.nativeNftables=true"}}
	for _, p := range profiles {
		cases = append(cases, []string{"-f", valuesFile, "-f", p}, []string{"-f", p})
	}
	// A profile alone is compared on what profiles set.
	for _, args := range cases {
		what := strings.ReplaceAll(strings.Join(args, " "), m+"/", "")
		t.Run(what, func(t *testing.T) {
			ours, err := render(t, chartDir(t), append(slices.Clone(args), ourImage...)...)
			if strings.HasSuffix(args[len(args)-1], "/ambient.yaml") {
				if err == nil || !strings.Contains(err.Error(), "ambient.enabled true: istio-cni puts pods into a sidecar mesh only") {
					t.Errorf("upstream's ambient profile: %v, want it refused as sidecar-only", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			up, err := render(t, upChart, args...)
			if err != nil {
				t.Fatal(err)
			}
			if args[1] == valuesFile {
				compareShared(t, what, ours, up)
			} else {
				compareShared(t, what, ours, up, profileKeys...)
			}
		})
	}
}

// TestUpstreamProfilesByName: --set profile=NAME and global.platform=NAME
// take each of upstream's profile names and mean what upstream's do, from
// upstream's values file (this chart's own defaults differ on purpose:
// docs/platforms.md).
func TestUpstreamProfilesByName(t *testing.T) {
	_, upChart, valuesFile := upstreamChart(t)
	files, err := filepath.Glob(filepath.Join(upChart, "files", "profile-*.yaml"))
	if err != nil || len(files) < 10 {
		t.Fatalf("upstream's profiles: %v, %v", files, err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "profile-"), ".yaml")
		set := "profile=" + name
		switch {
		case strings.HasPrefix(name, "platform-"):
			set = "global.platform=" + strings.TrimPrefix(name, "platform-")
		case strings.HasPrefix(name, "compatibility-version-"):
			set = "compatibilityVersion=" + strings.TrimPrefix(name, "compatibility-version-")
		}
		t.Run(set, func(t *testing.T) {
			ours, err := render(t, chartDir(t), append([]string{"-f", valuesFile, "--set", set}, ourImage...)...)
			if name == "ambient" {
				if err == nil || !strings.Contains(err.Error(), "sidecar mesh only") {
					t.Errorf("profile=ambient: %v, want it refused as sidecar-only", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			up, err := render(t, upChart, "-f", valuesFile, "--set", set)
			if err != nil {
				t.Fatal(err)
			}
			compareShared(t, set, ours, up)
		})
	}
}

// TestProfilesFollowUpstream: each of the chart's files/profile-NAME.yaml
// (but the platforms', which are istio-cni's own and compared by
// rendering) holds exactly the part of upstream's profile of that name
// that concerns istio-cni: its cni: values and the top-level and global
// keys this chart's schema takes, not other charts' keys (which the schema
// takes, too, so that upstream's files install).
func TestProfilesFollowUpstream(t *testing.T) {
	_, upChart, _ := upstreamChart(t)
	var schema struct {
		Properties map[string]struct {
			Description string
			Properties  map[string]struct{ Description string }
		}
	}
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json")) // #nosec G304 -- the chart's schema
	if err != nil || json.Unmarshal(raw, &schema) != nil {
		t.Fatalf("the chart's schema: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(upChart, "files", "profile-*.yaml"))
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasPrefix(base, "profile-platform-") {
			continue
		}
		var up, ours map[string]any
		readYAML(t, f, &up)
		readYAML(t, filepath.Join(chartDir(t), "files", base), &ours)
		want := map[string]any{}
		for k, v := range up {
			p, known := schema.Properties[k]
			switch {
			case k == "global":
				g := map[string]any{}
				for gk, gv := range v.(map[string]any) {
					if p, ok := schema.Properties["global"].Properties[gk]; ok && !otherCharts(p.Description) {
						g[gk] = gv
					}
				}
				if len(g) > 0 {
					want[k] = g
				}
			case k == "cni", known && !otherCharts(p.Description):
				want[k] = v
			}
		}
		if len(ours) == 0 {
			ours = map[string]any{}
		}
		if !reflect.DeepEqual(ours, want) {
			t.Errorf("files/%s: %v; upstream's, for istio-cni: %v", base, ours, want)
		}
	}
}

// otherCharts says whether a schema description marks a key of Istio's
// other charts.
func otherCharts(description string) bool {
	return strings.HasPrefix(description, "a key of Istio's other charts")
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path) // #nosec G304 -- a chart's file
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestUpstreamValuesHonoured: values upstream's chart has and this chart
// did not take before do what upstream's do.
func TestUpstreamValuesHonoured(t *testing.T) {
	objs := helmTemplate(t, "global.logging.level=debug", "global.imagePullPolicy=Always",
		"global.imagePullSecrets[0]=pull", "_internal_defaults_do_not_set.resources=null", "global.defaultResources.requests.cpu=50m",
		"terminationGracePeriodSeconds=5", "useAppArmorAnnotation=true", "revision=canary", "ownerName=mesh",
		"repair.initContainerName=check-redirect", "cniConfFileName=10-calico.conflist")
	ds := daemonSet(objs)
	c := container(ds)
	d := configData(objs)
	for k, v := range map[string]string{"LOG_LEVEL": "debug", "VALIDATION_CONTAINER": "check-redirect", "MODE": "owned",
		"PRIMARY_CONFIG_NAME": "10-calico.conflist"} {
		if d[k] != v {
			t.Errorf("ConfigMap %s = %v, want %s", k, d[k], v)
		}
	}
	if c["imagePullPolicy"] != "Always" || fmt.Sprint(c["resources"]) != "map[requests:map[cpu:50m memory:40Mi]]" {
		t.Errorf("pull policy %v, resources %v", c["imagePullPolicy"], c["resources"])
	}
	if sa := objs["ServiceAccount istio-cni/istio-cni"]; fmt.Sprint(sa["imagePullSecrets"]) != "[map[name:pull]]" {
		t.Errorf("imagePullSecrets as upstream writes them: %v", sa["imagePullSecrets"])
	}
	spec := podSpec(ds)
	ann := podTemplate(ds)["metadata"].(map[string]any)["annotations"].(map[string]any)
	if fmt.Sprint(spec["terminationGracePeriodSeconds"]) != "5" || ann["container.apparmor.security.beta.kubernetes.io/install-cni"] != "unconfined" ||
		c["securityContext"].(map[string]any)["appArmorProfile"] != nil {
		t.Errorf("grace %v, AppArmor annotation %v, profile %v", spec["terminationGracePeriodSeconds"], ann, c["securityContext"])
	}
	if l := ds["metadata"].(map[string]any)["labels"].(map[string]any); l["istio.io/rev"] != "canary" || l["install.operator.istio.io/owning-resource"] != "mesh" {
		t.Errorf("DaemonSet labels %v", l)
	}
	if mode := configData(helmTemplate(t, "istioOwnedCNIConfig=false"))["MODE"]; mode != "inplace" {
		t.Errorf("istioOwnedCNIConfig=false: MODE %v, want inplace", mode)
	}
	// The legacy cni: prefix wins, as upstream's.
	if d := configData(helmTemplate(t, "excludeNamespaces={a}", "cni.excludeNamespaces={b}")); d["EXCLUDE_NAMESPACES"] != "b" {
		t.Errorf("cni.excludeNamespaces: %v", d["EXCLUDE_NAMESPACES"])
	}
	// global.resourceScope splits the objects between a cluster admin
	// (cluster-scoped) and a mesh admin (namespaced), together all of them.
	all := helmTemplate(t, "missedInjection.mode=restart")
	cl := helmTemplate(t, "missedInjection.mode=restart", "global.resourceScope=cluster")
	ns := helmTemplate(t, "missedInjection.mode=restart", "global.resourceScope=namespace")
	for k := range all {
		_, inCl := cl[k]
		_, inNs := ns[k]
		namespaced := !strings.Contains(k, " <nil>/")
		if inCl == inNs || inNs != namespaced {
			t.Errorf("%s: in the cluster scope %v, in the namespace scope %v", k, inCl, inNs)
		}
	}
	if len(cl)+len(ns) != len(all) {
		t.Errorf("the scopes render %d+%d objects, all %d", len(cl), len(ns), len(all))
	}
}

// TestUpstreamValuesNoted: upstream values that cannot apply are named,
// with the reason, in what helm install prints (NOTES.txt includes
// istio-cni.notes; helm template does not render NOTES, so a copy of the
// chart renders the helper as a value).
func TestUpstreamValuesNoted(t *testing.T) {
	m, _, valuesFile := upstreamChart(t)
	chart := filepath.Join(t.TempDir(), "istio-cni")
	if err := os.CopyFS(chart, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	probe := "notes: {{ include \"istio-cni.notes\" . | quote }}\n"
	if err := os.WriteFile(filepath.Join(chart, "templates", "notes-probe.yaml"), []byte(probe), 0o600); err != nil {
		t.Fatal(err)
	}
	notes := func(args ...string) string {
		t.Helper()
		out, err := helmTemplateOut(t, append([]string{"x", chart, "--show-only", "templates/notes-probe.yaml"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct{ Notes string }
		if err := yaml.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Notes
	}
	if n := notes(); n != "" {
		t.Errorf("the chart's own defaults noted:\n%s", n)
	}
	got := notes("-f", valuesFile, "-f", filepath.Join(m, "helm-profiles", "platform-openshift.yaml"),
		"--set", "global.variant=distroless", "--set", "global.networkPolicy.enabled=true", "--set", "global.nativeNftables=true",
		"--set", "compatibilityVersion=1.28", "--set", "global.waypoint.resources.requests.cpu=10m")
	for _, want := range []string{"variant distroless: istio-cni has one image", "global.logAsJson false",
		"global.networkPolicy.enabled: the agent runs on the host network",
		"ambient.*: istio-cni is sidecar-only", "compatibilityVersion 1.28",
		"pilot, trustedZtunnelNamespace, global.waypoint: values of Istio's other charts",
		// Upstream's file names upstream's install-cni image, which cannot
		// run this DaemonSet (it fails at once: the command is /install-cni).
		"global.hub, global.tag: the image is", "not tagged istio-cni's 0.1.0. If it is upstream's install-cni image (upstream's values file names it), it does not run here"} {
		if !strings.Contains(got, want) {
			t.Errorf("notes lack %q:\n%s", want, got)
		}
	}
	// Pointed at this project's image (a mirror keeps its version in its
	// tag), or at one the tag of which says nothing (untagged, a digest), no
	// note.
	for _, set := range [][]string{{"global.hub=registry.example/mirror", "global.tag=0.1.0"}, {"global.tag=v0.1.0"},
		{"global.tag=0.1.0-distroless"}, {"image=registry.example:5000/istio-cni/install-cni"},
		{"image=registry.example/istio-cni/install-cni@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}} {
		args := []string{"-f", valuesFile}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if got := notes(args...); strings.Contains(got, "global.hub") {
			t.Errorf("%v noted as someone else's image:\n%s", set, got)
		}
	}
}
