package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func podSpec(ds map[string]any) map[string]any {
	return ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

// The agent removes the node's startup taint cni.istio.io/not-ready, so it
// must run where that taint is: a user's tolerations (Helm replaces the
// whole list) never drop that toleration, or tainted nodes never get an
// agent and never lose the taint.
func TestStartupTaintAlwaysTolerated(t *testing.T) {
	notReady := "map[effect:NoSchedule key:cni.istio.io/not-ready operator:Exists]"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"map[operator:Exists]"}}, // the default tolerates every taint
		{[]string{"--set", "tolerations[0].key=dedicated", "--set", "tolerations[0].operator=Exists"}, []string{"map[key:dedicated operator:Exists]", notReady}},
		{[]string{"--set-json", "tolerations=[]"}, []string{notReady}},
		{[]string{"--set", "tolerations[0].key=cni.istio.io/not-ready", "--set", "tolerations[0].operator=Exists"}, []string{"map[key:cni.istio.io/not-ready operator:Exists]"}},
	} {
		objs, err := render(t, chartDir(t), tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		tolerations, _ := podSpec(daemonSet(objs))["tolerations"].([]any)
		for _, tol := range tolerations {
			got = append(got, fmt.Sprint(tol))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: tolerations %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A custom repair.brokenPodLabelKey reaches the policy that holds the
// agent's label writes to one key; otherwise every label is denied.
func TestBrokenPodLabelKeyReachesThePolicy(t *testing.T) {
	objs := helmTemplate(t, "repair.repairPods=false", "repair.labelPods=true", "repair.brokenPodLabelKey=mesh.example/broken")
	policy := fmt.Sprint(objs["ValidatingAdmissionPolicy <nil>/istio-cni-node-pod-writes"])
	if !strings.Contains(policy, "'mesh.example/broken'") || strings.Contains(policy, "cni.istio.io/uninitialized") {
		t.Errorf("the pod-writes policy does not name the configured key:\n%s", policy)
	}
}

// The agent's rights follow its final settings, env overrides included:
// an env value that needs pod writes renders them (and their policy), and
// the audit's capabilities come only with the audit.
func TestRightsFollowTheFinalSettings(t *testing.T) {
	writes := "ClusterRole <nil>/istio-cni-node-pod-writes"
	for _, tc := range []struct {
		set    []string
		writes bool
		caps   []string
	}{
		{nil, false, []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SETPCAP"}},
		{[]string{"env.AUDIT_ACTION=delete"}, true, []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SETPCAP"}},
		{[]string{"env.MISSED_INJECTION=restart"}, true, []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SETPCAP"}},
		{[]string{"repair.repairPods=false", "repair.labelPods=true", "env.AUDIT_ACTION=repair"}, false, []string{"NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SETPCAP"}},
		{[]string{"repair.enabled=false"}, false, nil},
		{[]string{"env.AUDIT_ACTION=off"}, false, nil},
	} {
		objs := helmTemplate(t, tc.set...)
		if _, ok := objs[writes]; ok != tc.writes {
			t.Errorf("--set %v: pod writes rendered %v, want %v", tc.set, ok, tc.writes)
		}
		var caps []string
		if add, ok := container(daemonSet(objs))["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"].([]any); ok {
			for _, c := range add {
				caps = append(caps, fmt.Sprint(c))
			}
		}
		if !slices.Equal(caps, tc.caps) {
			t.Errorf("--set %v: capabilities %v, want %v", tc.set, caps, tc.caps)
		}
	}
	out, err := helmTemplateOut(t, "x", chartDir(t), "--set", "env.AUDIT_ACTION=fix")
	if err == nil || !strings.Contains(out, `env.AUDIT_ACTION "fix"`) {
		t.Errorf("env.AUDIT_ACTION=fix: %v\n%s\nwant it refused, naming the value", err, out)
	}
}

// env as users write it in a values file: YAML 1.1 reads an unquoted off
// as false, and an empty value means unset. The ConfigMap carries what the
// agent accepts ("off", never "false", which would stop it at start) and
// the rights follow the same value.
func TestEnvOverridesFromAValuesFile(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   map[string]string
		caps   bool
	}{
		{"env:\n  AUDIT_ACTION: off\n  MISSED_INJECTION: off\n", map[string]string{"AUDIT_ACTION": "off", "MISSED_INJECTION": "off"}, false},
		{"env:\n  AUDIT_ACTION: \"\"\n  AUDIT_LABEL_KEY: \"\"\n", map[string]string{"AUDIT_ACTION": "repair", "AUDIT_LABEL_KEY": "cni.istio.io/uninitialized"}, true},
		{"env:\n  AUDIT_ACTION: report\n", map[string]string{"AUDIT_ACTION": "report"}, true},
		// The config's shape from env: the names follow it as the agent
		// needs them, never a shape it refuses at start.
		{"env:\n  CHAINED_CNI_PLUGIN: false\n", map[string]string{"CHAINED_CNI_PLUGIN": "false", "OWNED_CONFIG_NAME": "istio-cni.conf", "MODE": "owned"}, true},
		{"env:\n  MODE: inplace\n", map[string]string{"MODE": "inplace", "OWNED_CONFIG_NAME": "02-istio-cni.conflist"}, true},
		// What the agent's parsers take, taken: strconv.ParseBool's forms,
		// empty for the chart's value, durations within the agent's bounds.
		{"env:\n  CHAINED_CNI_PLUGIN: \"0\"\n", map[string]string{"CHAINED_CNI_PLUGIN": "false", "OWNED_CONFIG_NAME": "istio-cni.conf"}, true},
		{"env:\n  CHAINED_CNI_PLUGIN: \"\"\n", map[string]string{"CHAINED_CNI_PLUGIN": "true"}, true},
		{"env:\n  NODE_TAINT: false\n  PLUGIN_TOKEN_TTL: 1h30m\n  AUDIT_CONFIRM: \"0\"\n  LOG_LEVEL: DEBUG\n  HEALTH_ADDR: \"[::1]:8000\"\n",
			map[string]string{"NODE_TAINT": "false", "PLUGIN_TOKEN_TTL": "1h30m", "AUDIT_CONFIRM": "0"}, true},
		{"cniConfFileName: 10-calico.conflist\nenv:\n  PRIMARY_CONFIG_NAME: \"\"\n  OWNED_CONFIG_NAME: 01-istio.conflist\n",
			map[string]string{"PRIMARY_CONFIG_NAME": "<absent>", "OWNED_CONFIG_NAME": "01-istio.conflist"}, true},
	} {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(tc.values), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := helmTemplateOut(t, "istio-cni", chartDir(t), "--namespace", "istio-cni", "-f", f)
		if err != nil {
			t.Fatalf("%q: %v", tc.values, err)
		}
		objs := objects(t, out)
		data, _ := objs["ConfigMap istio-cni/istio-cni-config"]["data"].(map[string]any)
		for k, v := range tc.want {
			if _, ok := data[k]; !ok && v == "<absent>" {
				continue
			}
			if data[k] != v {
				t.Errorf("%q: ConfigMap %s = %v, want %q", tc.values, k, data[k], v)
			}
		}
		_, caps := container(daemonSet(objs))["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"]
		if caps != tc.caps {
			t.Errorf("%q: capabilities added %v, want %v", tc.values, caps, tc.caps)
		}
	}
}
