package chart

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestAlertRules: the chart's alert rules pass `promtool check rules` and
// their unit tests (testdata/alerts_test.yaml: each alert fires on the
// series that mean trouble, after its `for`, and not on a healthy node's).
// promtool is Debian's prometheus package (make deps).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make deps)")
	}
	rules := filepath.Join(chartDir(t), "files", "alerts.yaml")
	if out, err := run(t, promtool, "check", "rules", rules); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := run(t, promtool, "test", "rules", filepath.Join("testdata", "alerts_test.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestMonitoringRendered: off by default; enabled, the PrometheusRule
// carries files/alerts.yaml as it is and the dashboard ConfigMap a valid
// Grafana dashboard, with the labels asked for.
func TestMonitoringRendered(t *testing.T) {
	for k := range helmTemplate(t) {
		if k == "PrometheusRule istio-cni/istio-cni" || k == "ConfigMap istio-cni/istio-cni-dashboard" {
			t.Errorf("%s rendered by default", k)
		}
	}
	objs := helmTemplate(t, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=prom",
		"monitoring.grafanaDashboard.enabled=true")
	rule := objs["PrometheusRule istio-cni/istio-cni"]
	var want map[string]any
	readYAML(t, filepath.Join(chartDir(t), "files", "alerts.yaml"), &want)
	if !reflect.DeepEqual(rule["spec"], want) {
		t.Errorf("PrometheusRule spec differs from files/alerts.yaml:\n%v", rule["spec"])
	}
	if l := rule["metadata"].(map[string]any)["labels"].(map[string]any); l["release"] != "prom" {
		t.Errorf("PrometheusRule labels %v", l)
	}
	cm := objs["ConfigMap istio-cni/istio-cni-dashboard"]
	var dash struct {
		UID    string
		Panels []map[string]any
	}
	data, _ := cm["data"].(map[string]any)["istio-cni.json"].(string)
	if err := json.Unmarshal([]byte(data), &dash); err != nil || dash.UID != "istio-cni" || len(dash.Panels) == 0 {
		t.Errorf("dashboard: %v, uid %q, %d panels", err, dash.UID, len(dash.Panels))
	}
	if l := cm["metadata"].(map[string]any)["labels"].(map[string]any); l["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v", l)
	}
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboard.json")) // #nosec G304 -- the chart's file
	if err != nil || yaml.Unmarshal(raw, new(map[string]any)) != nil {
		t.Errorf("files/dashboard.json: %v", err)
	}
}
