package nodeagent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// reportHandler is what the agent does with each of the plugin's
// reports: it logs it, so `kubectl logs` on the agent shows every pod's
// ADD, counts it, and wakes the audit for each pod an ADD concerned.
// Reports come from the socket (listenReports) and, for the ADDs the agent
// runs itself, from each run's goroutine (plugin.AgentSide.Report): one at
// a time, as the socket's loop alone used to take them (the notes are not
// safe for more). Make one per agent.
func (a *Agent) reportHandler(wake func(uid string)) func(reports.Report) {
	log := a.log.With("component", "plugin")
	verbs := newVerbMetrics(a.metrics.Registry)
	var mu sync.Mutex
	return func(rep reports.Report) {
		mu.Lock()
		defer mu.Unlock()
		attrs := []any{"verb", rep.Verb, "pod", rep.Pod, "container", rep.Container, "redirect", rep.Redirect,
			"reason", rep.Reason, "duration_ms", rep.DurationMS}
		if rep.Families != "" {
			attrs = append(attrs, "families", rep.Families)
		}
		verbs.count(rep)
		if rep.Error != "" {
			log.Error("plugin "+rep.Verb+" failed", append(attrs, "error", rep.Error)...)
		} else {
			log.Info("plugin "+rep.Verb, attrs...)
		}
		if rep.Verb == "ADD" && rep.PodUID != "" && wake != nil {
			wake(rep.PodUID)
		}
		for _, note := range rep.Notes() {
			switch {
			case note == reports.NoteCredentialsRefused:
				a.installer.PluginTokenRefused()
			case rep.Error == "":
				a.notes.tell(rep, note, log)
			}
		}
	}
}

// listenReports hands what the plugin reports on the node's socket to
// handle. It runs until ctx ends; wait returns once it has.
func (a *Agent) listenReports(ctx context.Context, handle func(reports.Report)) (wait func(), err error) {
	// The run directory is the installer's to create; it may not exist yet.
	if err := os.MkdirAll(a.cfg.Install.RunDir, 0o700); err != nil {
		return nil, err
	}
	l, err := reports.Listen(a.reportsSocket())
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = l.Close() }()
		if err := l.Run(ctx, handle); err != nil {
			a.log.Error("plugin reports stopped", "component", "plugin", "error", err.Error())
		}
	}()
	return func() { <-done }, nil
}

// reportsSocket is where the agent takes the plugin's reports.
func (a *Agent) reportsSocket() string {
	return filepath.Join(a.cfg.Install.RunDir, install.ReportsSocket)
}

// verbMetrics count the plugin's verbs on the node, from its reports.
type verbMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newVerbMetrics(reg prometheus.Registerer) verbMetrics {
	m := verbMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "istio_cni_plugin_verbs_total",
			Help: "The plugin's ADDs, DELs and CHECKs on this node, by verb and result (success, failure), as it reports them (best effort: none while no agent listens).",
		}, []string{"verb", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "istio_cni_plugin_verb_seconds",
			Help:    "How long the plugin's verbs took on this node, by verb, as it reports them.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"verb"}),
	}
	for _, verb := range []string{"ADD", "DEL", "CHECK"} {
		m.total.WithLabelValues(verb, "success")
		m.total.WithLabelValues(verb, "failure")
		m.duration.WithLabelValues(verb)
	}
	reg.MustRegister(m.total, m.duration)
	return m
}

func (m verbMetrics) count(rep reports.Report) {
	switch rep.Verb {
	case "ADD", "DEL", "CHECK":
	default:
		return // a label per unknown verb would let a report grow the series
	}
	result := "success"
	if rep.Error != "" {
		result = "failure"
	}
	m.total.WithLabelValues(rep.Verb, result).Inc()
	if rep.DurationMS > 0 {
		m.duration.WithLabelValues(rep.Verb).Observe(rep.DurationMS / 1000)
	}
}

// The Events the plugin's notes on a pod become.
const (
	// ReasonIPv4OnlyProxy: a pod's IPv6 is captured but its proxy is not
	// dual-stack.
	ReasonIPv4OnlyProxy = "IstioIPv6CapturedIPv4OnlyProxy"
	// ReasonProxyEnvNotRead and ReasonProxyEnvNotBool: ADD took env
	// vars of the pod's proxy as unset or false; the audit says the same
	// of the pods ADD left no record of.
	ReasonProxyEnvNotRead = audit.ReasonProxyEnvNotRead
	ReasonProxyEnvNotBool = audit.ReasonProxyEnvNotBool
)

// podNotes says what the plugin's reports note of a pod, once per pod and
// note.
type podNotes struct {
	events *Events // nil without API access: the log line only
	told   map[string]bool
}

// maxTold bounds what is remembered: a node runs at most a few hundred
// pods; forgetting all of them now and then repeats one note per pod.
const maxTold = 4096

func (n *podNotes) tell(rep reports.Report, note string, log *slog.Logger) {
	key := rep.PodUID + "/" + note
	if n.told[key] {
		return
	}
	if n.told == nil || len(n.told) >= maxTold {
		n.told = map[string]bool{}
	}
	n.told[key] = true
	kind, reason, msg := "", "", note // a newer plugin's: the log line only
	switch {
	case note == reports.NoteIPv4OnlyProxy:
		kind, reason, msg = corev1.EventTypeNormal, ReasonIPv4OnlyProxy, decision.IPv6ProxyNote
	case strings.HasPrefix(note, reports.NoteProxyEnvNotRead):
		names := strings.Split(strings.TrimPrefix(note, reports.NoteProxyEnvNotRead), "+")
		kind, reason, msg = corev1.EventTypeWarning, ReasonProxyEnvNotRead, decision.UnreadNote(names)
	case strings.HasPrefix(note, reports.NoteProxyEnvNotBool):
		names := strings.Split(strings.TrimPrefix(note, reports.NoteProxyEnvNotBool), "+")
		kind, reason, msg = corev1.EventTypeWarning, ReasonProxyEnvNotBool, decision.NotBoolNote(names)
	}
	log.Warn("pod note", "pod", rep.Pod, "uid", rep.PodUID, "note", msg)
	ns, name, ok := strings.Cut(rep.Pod, "/")
	if n.events == nil || !ok || reason == "" {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(rep.PodUID)}
	n.events.recorder.Event(ref, kind, reason, msg)
}
