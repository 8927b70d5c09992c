package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
)

// The chart's alert rules and dashboard read only series the running
// agent exports: every istio_cni_* name either file uses is in a scrape
// of the installed agent on the node. (That the series a rule needs
// exist at 0 before any event is checked per metric in the packages'
// tests, not here: this agent has installed already.)
func TestAlertsAndDashboardSeriesExported(t *testing.T) {
	requireInstalled(t)
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range []string{"alerts.yaml", "dashboard.json"} {
		data, err := os.ReadFile(filepath.Join(base, "helm", "istio-cni", "files", f)) // #nosec G304 -- the chart's file
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range regexp.MustCompile(`istio_cni_[a-z_]+`).FindAllString(string(data), -1) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) < 8 {
		t.Fatalf("only %d series named in the alerts and dashboard: %v", len(names), names)
	}
	exported := map[string]bool{}
	for line := range strings.Lines(scrape(t)) {
		if line == "" || line[0] == '#' {
			continue
		}
		exported[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
	}
	for _, n := range names {
		if !exported[n] {
			t.Errorf("%s is named by the alerts or the dashboard but the agent does not export it", n)
		}
	}
}
