package audit

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the audit's series.
type Metrics struct {
	// Unredirected is the number of meshed pods currently running without
	// their rules (confirmed, not yet repaired).
	Unredirected prometheus.Gauge
	// Checked is the number of meshed pods the last full pass checked;
	// Unchecked those started but whose namespace it could not read.
	Checked   prometheus.Gauge
	Unchecked prometheus.Gauge
	// Findings counts pods found running unredirected.
	Findings prometheus.Counter
	// Actions counts what was done about them, by action and result
	// (success or failure).
	Actions *prometheus.CounterVec
	// Errors counts checks that could not read a pod's namespace.
	Errors prometheus.Counter
	// PodsRepaired is upstream istio-cni's
	// istio_cni_repair_pods_repaired_total, kept for its dashboards and
	// alerts: Actions under upstream's labels (type, result success or
	// fail).
	PodsRepaired *prometheus.CounterVec
	// PassSeconds is the duration of full passes.
	PassSeconds prometheus.Histogram
	// LastPass is when the last full pass ended (Unix seconds; 0 before
	// the first): a stale one is an audit that stopped.
	LastPass prometheus.Gauge
	// Interval is AUDIT_INTERVAL, the full pass's period: what makes
	// LastPass stale.
	Interval prometheus.Gauge
}

// NewMetrics registers the audit's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Unredirected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_audit_pods_unredirected",
			Help: "Meshed pods on this node currently running without their redirect rules.",
		}),
		Checked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_audit_pods_checked",
			Help: "Meshed pods the last full audit pass checked.",
		}),
		Unchecked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_audit_pods_unchecked",
			Help: "Started meshed pods the last full audit pass could not check (no live process found, or the namespace unreadable).",
		}),
		Findings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_cni_audit_findings_total",
			Help: "Meshed pods found running without their redirect rules.",
		}),
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_cni_audit_actions_total",
			Help: "Actions on pods found unredirected, by action (repair, delete, label) and result (success, failure).",
		}, []string{"action", "result"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_cni_audit_check_errors_total",
			Help: "Pod checks that could not read the pod's network namespace.",
		}),
		PassSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "istio_cni_audit_pass_seconds",
			Help:    "Duration of a full audit pass over the node's pods.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		Interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_audit_interval_seconds",
			Help: "The audit's full-pass period (AUDIT_INTERVAL), in seconds.",
		}),
		LastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_audit_last_pass_timestamp_seconds",
			Help: "When the last full audit pass over the node's pods ended (Unix seconds; 0 before the first).",
		}),
	}
	m.PodsRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "istio_cni_repair_pods_repaired_total",
		Help: "Pods acted on by the audit, by type (repair, delete, label) and result (success, fail); upstream istio-cni's series.",
	}, []string{"type", "result"})
	// Exported from the start, at 0, as dashboards expect.
	for _, a := range []Action{Repair, Delete, Label} {
		for _, r := range []string{"success", "fail"} {
			m.PodsRepaired.WithLabelValues(string(a), r)
		}
	}
	reg.MustRegister(m.Unredirected, m.Checked, m.Unchecked, m.Findings, m.Actions, m.Errors, m.PassSeconds, m.LastPass, m.Interval, m.PodsRepaired)
	return m
}

// acted counts an action in both our series and upstream's.
func (m *Metrics) acted(action Action, ok bool) {
	result, upstream := "success", "success"
	if !ok {
		result, upstream = "failure", "fail"
	}
	m.Actions.WithLabelValues(string(action), result).Inc()
	m.PodsRepaired.WithLabelValues(string(action), upstream).Inc()
}
