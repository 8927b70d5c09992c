package install

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the installer's Prometheus series, on their own registry.
type Metrics struct {
	Registry *prometheus.Registry
	// Writes counts files (re)written, by what and why: reason "install" at
	// start-up, otherwise the change that made the repair necessary.
	Writes *prometheus.CounterVec
	// Preemptions counts foreign configs that came to sort before ours.
	Preemptions prometheus.Counter
	// Preempted is 1 while a foreign config sorts before ours.
	Preempted prometheus.Gauge
	// Conflict is 1 while another writer keeps undoing us and we have
	// stopped fighting it.
	Conflict prometheus.Gauge
	// Ready mirrors /readyz.
	Ready prometheus.Gauge
	// StartTime is when the agent started, in Unix seconds: its changes
	// count restarts, which a crash loop's scrapes still show.
	StartTime prometheus.Gauge
	// ReadySeconds is the time from the installer's start to its first
	// readiness: how long a node that (re)starts the agent waits for it.
	ReadySeconds prometheus.Gauge
	// RepairSeconds is the time from noticing a change to having repaired.
	RepairSeconds prometheus.Histogram
	// Installs is upstream istio-cni's istio_cni_installs_total, kept for
	// its dashboards and alerts: reconciles that wrote files, by result
	// (SUCCESS, or the first failing step as upstream names it).
	Installs *prometheus.CounterVec
	// TokenMints counts the plugin's token mints by result.
	TokenMints *prometheus.CounterVec
}

// Upstream's istio_cni_installs_total results.
const (
	InstallSuccess           = "SUCCESS"
	InstallBinaryFailure     = "COPY_BINARIES_FAILURE"
	InstallKubeconfigFailure = "CREATE_KUBECONFIG_FAILURE"
	InstallConfigFailure     = "CREATE_CNI_CONFIG_FAILURE"
)

// NewMetrics registers the series.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_cni_install_writes_total",
			Help: "Files the installer wrote, by file (binary, kubeconfig, conflist) and reason.",
		}, []string{"file", "reason"}),
		Preemptions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "istio_cni_install_preemptions_total",
			Help: "Times a foreign CNI config came to sort before istio-cni's.",
		}),
		Preempted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_install_preempted",
			Help: "1 while a foreign CNI config sorts before istio-cni's.",
		}),
		Conflict: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_install_conflict",
			Help: "1 while another writer keeps undoing istio-cni's files and the installer has stopped fighting.",
		}),
		Ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_install_ready",
			Help: "1 while the binary, kubeconfig and a first-sorting chained conflist are in place and watched.",
		}),
		StartTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_agent_start_time_seconds",
			Help: "When the agent started, in seconds since the Unix epoch; its changes count restarts.",
		}),
		ReadySeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_install_ready_seconds",
			Help: "Seconds from the agent's start to its first readiness; 0 until then.",
		}),
		RepairSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "istio_cni_install_repair_seconds",
			Help:    "Time from noticing a change to having repaired it.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5},
		}),
		Installs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_cni_installs_total",
			Help: "Installs (reconciles that wrote files), by result; upstream istio-cni's series.",
		}, []string{"result"}),
		TokenMints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_cni_plugin_token_mints_total",
			Help: "Mints of the plugin's short-lived token, by result (success, failure); failures are retried, and the token lapses after a fifth of its lifetime of them.",
		}, []string{"result"}),
	}
	for _, r := range []string{"success", "failure"} {
		m.TokenMints.WithLabelValues(r)
	}
	m.Registry.MustRegister(m.Writes, m.Preemptions, m.Preempted, m.Conflict, m.Ready, m.StartTime, m.ReadySeconds, m.RepairSeconds, m.Installs, m.TokenMints)
	return m
}
