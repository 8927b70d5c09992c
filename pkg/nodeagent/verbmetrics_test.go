package nodeagent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// The plugin's reports become ADD/DEL/CHECK counts by result and a
// latency histogram; a report naming another verb adds no series.
func TestVerbMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newVerbMetrics(reg)
	m.count(reports.Report{Verb: "ADD", DurationMS: 12})
	m.count(reports.Report{Verb: "ADD", Error: "no pod", DurationMS: 3})
	m.count(reports.Report{Verb: "BOGUS"})
	if ok, failed := testutil.ToFloat64(m.total.WithLabelValues("ADD", "success")), testutil.ToFloat64(m.total.WithLabelValues("ADD", "failure")); ok != 1 || failed != 1 {
		t.Errorf("ADD success %v, failure %v; want 1 and 1", ok, failed)
	}
	if n := testutil.CollectAndCount(m.total); n != 6 {
		t.Errorf("%d verb series, want 6 (3 verbs × 2 results, from the start)", n)
	}
	if n, err := testutil.GatherAndCount(reg, "istio_cni_plugin_verb_seconds"); err != nil || n != 3 {
		t.Errorf("%d latency series (%v), want 3", n, err)
	}
}
