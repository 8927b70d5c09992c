package chart

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
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

// TestPodMonitorRendered: off by default; enabled, a PodMonitor selects the
// DaemonSet's pods (its selector is the DaemonSet's) in the release's
// namespace by the agent's metrics port, names the job the alerts' absent
// and scrape rules read, and carries the labels and interval asked for.
func TestPodMonitorRendered(t *testing.T) {
	const key = "PodMonitor istio-cni/istio-cni-node"
	if _, ok := helmTemplate(t)[key]; ok {
		t.Errorf("%s rendered by default", key)
	}
	objs := helmTemplate(t, "monitoring.podMonitor.enabled=true", "monitoring.podMonitor.labels.release=prom",
		"monitoring.podMonitor.interval=15s")
	pm, ok := objs[key]
	if !ok {
		t.Fatalf("no %s with monitoring.podMonitor.enabled=true", key)
	}
	var got struct {
		APIVersion string `json:"apiVersion"`
		Metadata   struct{ Labels map[string]string }
		Spec       struct {
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			}
			PodMetricsEndpoints []struct {
				Port, Path, Interval string
				Relabelings          []struct {
					Action, TargetLabel, Replacement string
					SourceLabels                     []string `json:"sourceLabels"`
				}
			} `json:"podMetricsEndpoints"`
		}
	}
	remarshal(t, pm, &got)
	var ds struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			}
			Template struct {
				Metadata struct{ Labels map[string]string }
				Spec     struct {
					Containers []struct {
						Name  string
						Ports []struct {
							Name          string
							ContainerPort int `json:"containerPort"`
						}
					}
				}
			}
		}
	}
	remarshal(t, objs["DaemonSet istio-cni/istio-cni-node"], &ds)
	if got.APIVersion != "monitoring.coreos.com/v1" || got.Metadata.Labels["release"] != "prom" ||
		!reflect.DeepEqual(got.Spec.NamespaceSelector.MatchNames, []string{"istio-cni"}) {
		t.Errorf("PodMonitor %s, labels %v, namespaces %v", got.APIVersion, got.Metadata.Labels, got.Spec.NamespaceSelector.MatchNames)
	}
	if len(ds.Spec.Selector.MatchLabels) == 0 || !reflect.DeepEqual(got.Spec.Selector.MatchLabels, ds.Spec.Selector.MatchLabels) {
		t.Errorf("PodMonitor selects %v, the DaemonSet's pods are %v", got.Spec.Selector.MatchLabels, ds.Spec.Selector.MatchLabels)
	}
	for k, v := range got.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the agent's pods lack %s=%s", k, v)
		}
	}
	if len(got.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("endpoints %+v, want one", got.Spec.PodMetricsEndpoints)
	}
	ep := got.Spec.PodMetricsEndpoints[0]
	if ep.Path != "/metrics" || ep.Interval != "15s" {
		t.Errorf("endpoint path %q, interval %q", ep.Path, ep.Interval)
	}
	named := false
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			named = named || (p.Name == ep.Port && c.Name == "install-cni")
		}
	}
	if !named {
		t.Errorf("endpoint port %q is no port of the agent's container: %+v", ep.Port, ds.Spec.Template.Spec.Containers)
	}
	// The job the alerts' absent and scrape rules read.
	alerts, err := os.ReadFile(filepath.Join(chartDir(t), "files", "alerts.yaml")) // #nosec G304 -- the chart's file
	if err != nil {
		t.Fatal(err)
	}
	job := ""
	for _, r := range ep.Relabelings {
		if r.TargetLabel == "job" && r.Action == "replace" && len(r.SourceLabels) == 0 {
			job = r.Replacement
		}
	}
	if job == "" || !strings.Contains(string(alerts), `job="`+job+`"`) {
		t.Errorf("PodMonitor job %q: files/alerts.yaml reads another", job)
	}
	// Without an interval, Prometheus' own.
	var plain struct {
		Spec struct {
			PodMetricsEndpoints []map[string]any `json:"podMetricsEndpoints"`
		}
	}
	remarshal(t, helmTemplate(t, "monitoring.podMonitor.enabled=true")[key], &plain)
	if len(plain.Spec.PodMetricsEndpoints) != 1 || plain.Spec.PodMetricsEndpoints[0]["interval"] != nil {
		t.Errorf("endpoints %v by default, want one without an interval (Prometheus' own)", plain.Spec.PodMetricsEndpoints)
	}
}

// remarshal decodes a rendered object into a typed view of it.
func remarshal(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}
