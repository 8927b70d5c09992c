package chart

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/nodeagent"
)

// setArgs turns key=value pairs into helm's --set arguments.
func setArgs(set ...string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// TestPullPolicyAsUpstream: pullPolicy and global.imagePullPolicy give the
// agent's pull policy as upstream's chart gives its own (pullPolicy first),
// and with neither set the field is left out, for Kubernetes' default: both
// charts render each case from their own defaults and must agree.
func TestPullPolicyAsUpstream(t *testing.T) {
	_, upChart, _ := upstreamChart(t)
	for _, set := range [][]string{nil, {"global.imagePullPolicy=Always"}, {"global.imagePullPolicy=IfNotPresent"},
		{"pullPolicy=Never"}, {"pullPolicy=Never", "global.imagePullPolicy=Always"}} {
		ours, err := render(t, chartDir(t), setArgs(set...)...)
		if err != nil {
			t.Fatal(err)
		}
		up, err := render(t, upChart, setArgs(set...)...)
		if err != nil {
			t.Fatal(err)
		}
		o, inOurs := container(daemonSet(ours))["imagePullPolicy"]
		u, inUp := container(daemonSet(up))["imagePullPolicy"]
		if inOurs != inUp || o != u {
			t.Errorf("--set %v: imagePullPolicy %v (set: %v) here, %v (set: %v) in upstream's chart", set, o, inOurs, u, inUp)
		}
	}
}

// TestGlobalIstioNamespace: global.istioNamespace, which Istio's charts
// share, is the agent's ISTIO_NAMESPACE; env.ISTIO_NAMESPACE, the more
// specific, wins over it.
func TestGlobalIstioNamespace(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"global.istioNamespace=mesh-system"}, "mesh-system"},
		{[]string{"cni.global.istioNamespace=mesh-system"}, "mesh-system"},
		{[]string{"global.istioNamespace=mesh-system", "env.ISTIO_NAMESPACE=mesh-canary"}, "mesh-canary"},
	} {
		if got := configData(helmTemplate(t, tc.set...))["ISTIO_NAMESPACE"]; got != tc.want {
			t.Errorf("--set %v: ISTIO_NAMESPACE %v, want %s", tc.set, got, tc.want)
		}
	}
}

// TestSchemaRefusesUnknownGlobalAndEnvKeys: a misspelt key under global or
// env fails the install, naming it and listing the keys taken, while
// upstream's own values file and the profiles that carry other charts'
// global keys still install.
func TestSchemaRefusesUnknownGlobalAndEnvKeys(t *testing.T) {
	m, _, valuesFile := upstreamChart(t)
	for _, tc := range []struct {
		set  string
		want []string
	}{
		// The key, where, and (the error's second part) the keys taken.
		{"global.platfrom=k3s", []string{"at '/global': additional properties 'platfrom'", "'platform'"}},
		{"cni.global.imagePullPolicies=Always", []string{"at '/cni/global': additional properties 'imagePullPolicies'", "'imagePullPolicy'"}},
		{"global.istioNamespace=Istio_System", []string{"at '/global/istioNamespace'"}},
		{"env.AUDIT_INTERVALL=10s", []string{"at '/env': additional properties 'AUDIT_INTERVALL'", "'AUDIT_INTERVAL'"}},
		// The DaemonSet sets it itself: a ConfigMap value would be ignored.
		{"env.CNI_NET_DIR=/etc/my/net.d", []string{"at '/env': additional properties 'CNI_NET_DIR'"}},
	} {
		out, err := helmTemplateOut(t, "x", chartDir(t), "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: accepted, want it refused", tc.set)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("--set %s: the error does not name %s:\n%s", tc.set, w, out)
			}
		}
	}
	for _, files := range [][]string{{valuesFile}, {valuesFile, filepath.Join(m, "helm-profiles", "demo.yaml")},
		{valuesFile, filepath.Join(m, "helm-profiles", "remote.yaml")}} {
		var args []string
		for _, f := range files {
			args = append(args, "-f", f)
		}
		if _, err := render(t, chartDir(t), args...); err != nil {
			t.Errorf("upstream's %v: %v", files, err)
		}
	}
}

// schemaKeys are the keys values.schema.json takes under global and env.
// Each object refuses other keys (additionalProperties, whose error names
// the key) and repeats its keys as propertyNames, whose error lists them.
func schemaKeys(t *testing.T) (global, env []string) {
	t.Helper()
	type object struct {
		Properties           map[string]any
		PropertyNames        struct{ Enum []string }
		AdditionalProperties any
	}
	var schema struct{ Properties struct{ Global, Env object } }
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json")) // #nosec G304 -- the chart's schema
	if err == nil {
		err = json.Unmarshal(raw, &schema)
	}
	if err != nil {
		t.Fatalf("the chart's schema: %v", err)
	}
	for what, o := range map[string]object{"global": schema.Properties.Global, "env": schema.Properties.Env} {
		keys := slices.Sorted(maps.Keys(o.Properties))
		if o.AdditionalProperties != false || len(keys) == 0 {
			t.Errorf("the schema's %s takes any key", what)
		}
		if names := slices.Sorted(slices.Values(o.PropertyNames.Enum)); !slices.Equal(names, keys) {
			t.Errorf("the schema's %s: propertyNames %v, properties %v", what, names, keys)
		}
		if what == "global" {
			global = keys
		} else {
			env = keys
		}
	}
	return global, env
}

// TestSchemaTakesUpstreamsGlobals: every global key upstream's chart reads
// (its templates) or carries (its profiles, which users pass with -f) is
// one the schema takes, so upstream's values files still install.
func TestSchemaTakesUpstreamsGlobals(t *testing.T) {
	_, upChart, _ := upstreamChart(t)
	global, _ := schemaKeys(t)
	used := map[string]string{}
	templates, _ := filepath.Glob(filepath.Join(upChart, "templates", "*"))
	read := regexp.MustCompile(`Values\.global\)?\.([A-Za-z_]+)`)
	for _, f := range templates {
		data, err := os.ReadFile(f) // #nosec G304 -- upstream's chart
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range read.FindAllStringSubmatch(string(data), -1) {
			used[m[1]] = filepath.Base(f)
		}
	}
	profiles, _ := filepath.Glob(filepath.Join(upChart, "files", "profile-*.yaml"))
	// Istio's other charts' values files too: an umbrella chart, or one
	// values file shared across Istio's charts, hands their globals to
	// this one (Helm copies a parent's global into every subchart).
	others, _ := filepath.Glob(filepath.Join(upChart, "..", "*", "values.yaml"))
	nested, _ := filepath.Glob(filepath.Join(upChart, "..", "*", "*", "values.yaml"))
	if len(others)+len(nested) < 5 {
		t.Fatalf("Istio's other charts: %v %v", others, nested)
	}
	profiles = append(append(profiles, others...), nested...)
	for _, f := range append(profiles, filepath.Join(upChart, "values.yaml")) {
		var v struct {
			Global   map[string]any
			Defaults struct{ Global map[string]any } `json:"_internal_defaults_do_not_set"`
		}
		readYAML(t, f, &v)
		for k := range v.Global {
			used[k] = filepath.Base(f)
		}
		for k := range v.Defaults.Global {
			used[k] = filepath.Base(f)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %v in upstream's chart", used)
	}
	for k, where := range used {
		if !slices.Contains(global, k) {
			t.Errorf("global.%s (upstream's %s) is not in the schema", k, where)
		}
	}
}

// TestSchemaEnvIsTheAgentsSettings: env takes exactly the agent's settings
// (the variables it reads at start) that its ConfigMap can change: not
// those the DaemonSet sets on the container, which win over the
// ConfigMap's.
func TestSchemaEnvIsTheAgentsSettings(t *testing.T) {
	read := map[string]bool{}
	_, _ = nodeagent.ParseFlags(nil, func(k string) string { read[k] = true; return "" }, "/")
	// RUN_DIR's old name: the DaemonSet's RUN_DIR wins over it.
	if !read["KUBECONFIG_DIR"] {
		t.Error("the agent no longer reads KUBECONFIG_DIR: drop it here")
	}
	delete(read, "KUBECONFIG_DIR")
	// HOST_KUBECONFIG_PATH is set for a non-default cniRunDir.
	for _, e := range container(daemonSet(helmTemplate(t, "cniRunDir=/run/istio-cni")))["env"].([]any) {
		delete(read, e.(map[string]any)["name"].(string))
	}
	var want []string
	for k := range read {
		want = append(want, k)
	}
	slices.Sort(want)
	if _, env := schemaKeys(t); !slices.Equal(env, want) {
		t.Errorf("the schema's env keys:\n%v\nthe settings the agent's ConfigMap can change:\n%v", env, want)
	}
}
