package chart

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestTaintName: istiod's taint.name names the startup taint everywhere
// the chart does: the agent's TAINT_KEY, the admission policy that lets
// the agent change only that taint, and the toleration added to a list
// without it; env.TAINT_KEY wins over it.
func TestTaintName(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "cni.istio.io/not-ready"},
		{[]string{"taint.name=example.com/cni-not-ready"}, "example.com/cni-not-ready"},
		{[]string{"taint.name=example.com/cni-not-ready", "env.TAINT_KEY=example.com/other"}, "example.com/other"},
		{[]string{"taint.enabled=true", "taint.namespace=istio-cni"}, "cni.istio.io/not-ready"},
	} {
		objs := helmTemplate(t, append([]string{"tolerations[0].key=dedicated", "tolerations[0].operator=Exists"}, tc.set...)...)
		data, _ := objs["ConfigMap istio-cni/istio-cni-config"]["data"].(map[string]any)
		if data["TAINT_KEY"] != tc.want {
			t.Errorf("%v: TAINT_KEY %v, want %s", tc.set, data["TAINT_KEY"], tc.want)
		}
		policy, err := yaml.Marshal(objs["ValidatingAdmissionPolicy <nil>/istio-cni-node-taint"])
		if err != nil {
			t.Fatal(err)
		}
		// Another key: the default one is only the agent's to remove
		// (test/integration TestNodeTaintPolicyNewKey runs it).
		retiring := strings.Contains(string(policy), "may only remove cni.istio.io/not-ready")
		if n := strings.Count(string(policy), "'"+tc.want+"'"); (tc.want == "cni.istio.io/not-ready" && (n != 3 || retiring)) || (tc.want != "cni.istio.io/not-ready" && (n != 3 || !retiring)) {
			t.Errorf("%v: the admission policy names %s %d times (want 3), retiring the default key %v:\n%s", tc.set, tc.want, n, retiring, policy)
		}
		spec := daemonSet(objs)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		tolerated := false
		for _, tol := range spec["tolerations"].([]any) {
			m := tol.(map[string]any)
			tolerated = tolerated || (m["key"] == tc.want && m["operator"] == "Exists" && m["effect"] == "NoSchedule")
		}
		if !tolerated {
			t.Errorf("%v: tolerations %v, want %s:NoSchedule tolerated", tc.set, spec["tolerations"], tc.want)
		}
	}
}

// TestGoMemLimit: the agent's Go runtime is told the container's memory
// limit (GOMEMLIMIT, as upstream's chart does), so it collects harder
// near the limit instead of being OOM-killed at it.
func TestGoMemLimit(t *testing.T) {
	spec := daemonSet(helmTemplate(t, "resources.limits.memory=200Mi"))["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	for _, e := range c["env"].([]any) {
		m := e.(map[string]any)
		if m["name"] != "GOMEMLIMIT" {
			continue
		}
		ref, _ := m["valueFrom"].(map[string]any)["resourceFieldRef"].(map[string]any)
		if ref["resource"] != "limits.memory" || (ref["containerName"] != nil && ref["containerName"] != c["name"]) {
			t.Errorf("GOMEMLIMIT from %v, want the container's limits.memory", m["valueFrom"])
		}
		limits, _ := c["resources"].(map[string]any)["limits"].(map[string]any)
		if limits["memory"] != "200Mi" {
			t.Errorf("limits %v", limits)
		}
		return
	}
	t.Errorf("no GOMEMLIMIT in the agent's env: %v", c["env"])
}
