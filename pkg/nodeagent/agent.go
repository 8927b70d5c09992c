package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/lifecycle"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/pkg/nodeagent/podcache"
	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
	"istio-cni.local/istio-cni/pkg/plugin"
	"istio-cni.local/istio-cni/pkg/version"
	"istio-cni.local/istio-cni/pkg/wire/lookups"
)

// Agent is the node agent: the installer and the duties that need the API.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	beats     *health.Beats
	metrics   *install.Metrics
	installer *install.Installer
	lifecycle *lifecycle.Watcher // nil without API access
	audit     *audit.Auditor     // nil when off or without API access
	missed    *missed.Detector   // nil when off or without API access
	// pods is the one informer over the node's pods, for the audit, the
	// missed-injection detector and the plugin's lookups; nil when both
	// duties are off.
	pods *podcache.Pods
	// missedFrom are every namespace's labels and the cluster's sidecar
	// injectors, for the detector.
	missedFrom *missedSources
	taint      *taint.Controller
	events     *Events // nil without API access: Events and their flush
	notes      podNotes
	addrs      addrList
	// sight says whether the agent sees the API server (nil without API
	// access); probe is its cheap periodic question.
	sight *apiSight
	probe func(context.Context) error
}

// New builds the agent; its first log line names its version. rc is the
// API access; nil runs the installer alone: no audit, no taint, and at
// shutdown the plugin is always left installed.
func New(cfg Config, rc *rest.Config, log *slog.Logger) (*Agent, error) {
	log.Info("starting", "version", version.Get(), "log_level", cfg.Install.LogLevel.String(),
		"memory_limit_bytes", debug.SetMemoryLimit(-1)) // GOMEMLIMIT, or math.MaxInt64 without it
	log.Debug("settings", "mode", string(cfg.Install.Mode), "chained", cfg.Install.Chained, "owned_config", cfg.Install.OwnedConfigName,
		"exclude_namespaces", cfg.Install.ExcludeNamespaces, "audit_action", string(cfg.AuditAction), "audit_interval", cfg.AuditInterval.String(),
		"missed_injection", string(cfg.MissedInjection), "node_taint", cfg.NodeTaint, "taint_key", cfg.TaintKey, "conf_group_read", cfg.Install.ConfGroupRead)
	a := &Agent{cfg: cfg, log: log, beats: health.NewBeats(nil), metrics: install.NewMetrics()}
	registerBuildInfo(a.metrics.Registry)
	deps := install.Deps{Log: log, Metrics: a.metrics, Liveness: a.beats}
	if rc == nil {
		if cfg.Install.PluginServiceAccount != "" {
			return nil, fmt.Errorf("--plugin-service-account %q needs API access to mint its tokens", cfg.Install.PluginServiceAccount)
		}
		log.Warn("no API access: at shutdown the plugin is always left installed; no node audit, no taint")
		a.installer = install.New(cfg.Install, deps)
		return a, nil
	}
	// Every request of the agent's clients tells the sight whether the
	// API answered.
	a.sight = newAPISight(log.With("component", "api"), nil)
	a.sight.register(a.metrics.Registry)
	rc = rest.CopyConfig(rc)
	rc.Wrap(a.sight.wrap)
	cs, err := kubeclient.New(rc)
	if err != nil {
		return nil, err
	}
	a.events = newEvents(cs, cfg.NodeName)
	a.notes.events = a.events
	a.sight.back = nodeNotices{events: a.events, node: cfg.NodeName}.APIUnreachable
	// The agent's own namespace, from the API server's watch cache
	// (ResourceVersion 0): authenticated and authorized as the agent, no
	// etcd read, a few hundred bytes.
	a.probe = func(ctx context.Context) error {
		_, err := cs.Namespaces().Get(ctx, cfg.Install.PodNamespace, metav1.GetOptions{ResourceVersion: "0"})
		return err
	}
	a.lifecycle = lifecycle.New(lifecycle.Config{Namespace: cfg.Install.PodNamespace, DaemonSet: cfg.DaemonSetName,
		ServiceAccount: cfg.ServiceAccount, NodeName: cfg.NodeName}, cs, log.With("component", "lifecycle"))
	deps.Uninstall = a.lifecycle.Check
	deps.Reinstalled = a.lifecycle.Reinstalled
	deps.Notify = nodeNotices{events: a.events, node: cfg.NodeName}
	if cfg.Install.PluginServiceAccount != "" {
		// A client of its own: the plugin's credential must not wait
		// behind the rate limit a burst of Events or relists spends.
		tokens, err := kubeclient.New(rc)
		if err != nil {
			return nil, err
		}
		if deps.PluginToken, err = install.PluginTokenMinter(tokens, cfg.Install.PodNamespace, cfg.Install.PluginServiceAccount,
			cfg.Install.PluginTokenTTL, cfg.NodeName); err != nil {
			return nil, err
		}
		// From the watch cache (ResourceVersion 0) unless fresh: a
		// UID, not the node's latest status, is what is asked.
		deps.NodeUID = func(ctx context.Context, fresh bool) (string, error) {
			rv := "0"
			if fresh {
				rv = ""
			}
			n, err := cs.Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{ResourceVersion: rv})
			if err != nil {
				return "", err
			}
			return string(n.UID), nil
		}
	}
	a.installer = install.New(cfg.Install, deps)
	if err := a.nodeDuties(cs, a.metrics.Registry); err != nil {
		return nil, err
	}
	return a, nil
}

// nodeDuties builds what the configuration turns on: the audit, the
// missed-injection detector, the taint.
func (a *Agent) nodeDuties(cs kubeclient.Interface, reg prometheus.Registerer) error {
	cfg := a.cfg
	if cfg.MissedInjection != missed.Off && cfg.NodeName == "" && cfg.AuditAction == audit.Off && !cfg.NodeTaint {
		// Reporting is on by default; an agent run without its node's
		// name (not as the DaemonSet runs it) still installs.
		a.log.Warn("not looking for pods that missed their sidecar injection: no --node-name (NODE_NAME)")
		cfg.MissedInjection = missed.Off
		a.cfg.MissedInjection = missed.Off
	}
	podDuties := cfg.AuditAction != audit.Off || cfg.MissedInjection != missed.Off
	if !podDuties && !cfg.NodeTaint {
		return nil
	}
	if cfg.NodeName == "" {
		return errors.New("--node-name: required (NODE_NAME from the downward API spec.nodeName) for the node audit, missed injections and the taint; or set --audit-action=off, --missed-injection=off and --node-taint=false")
	}
	if podDuties {
		var err error
		if a.pods, err = podcache.New(cs, cfg.NodeName, a.sight.observeView); err != nil {
			return err
		}
		a.sight.setView(a.pods.Synced)
	}
	if cfg.AuditAction != audit.Off {
		a.audit = newAudit(cfg, cs, a.pods, a.events.recorder, reg, a.log.With("component", "audit"))
		if err := a.pods.OnChange(func(p *corev1.Pod) { a.audit.Wake(string(p.UID)) }); err != nil {
			return err
		}
	}
	if cfg.MissedInjection != missed.Off {
		var err error
		if a.missed, a.missedFrom, err = newMissed(cfg, cs, a.pods, a.events.recorder, reg, a.log.With("component", "missed-injection")); err != nil {
			return err
		}
		if err := a.pods.OnChange(func(*corev1.Pod) { a.missed.Wake() }); err != nil {
			return err
		}
	}
	if cfg.NodeTaint {
		tainted := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_node_tainted",
			Help: "1 while this node carries " + a.cfg.TaintKey + " as last set or seen by the agent.",
		})
		reg.MustRegister(tainted)
		a.taint = &taint.Controller{Client: cs, Node: cfg.NodeName, Key: cfg.TaintKey, Retired: taint.Retired(cfg.TaintKey), Ready: a.installer, Grace: cfg.TaintGrace,
			Exempt: []string{install.ShutdownReason, install.UninstalledReason, install.RefusedReason},
			Log:    a.log.With("component", "taint"), Tainted: tainted}
	}
	return nil
}

// Run serves the endpoints, runs every duty and the installer until ctx
// ends, then shuts down: the installer decides whether to uninstall while
// the other duties stop.
func (a *Agent) Run(ctx context.Context) error {
	stopServing, err := a.serve(ctx)
	if err != nil {
		return err
	}
	defer stopServing()
	dutiesCtx, stopDuties := context.WithCancel(ctx)
	defer stopDuties()
	var wg sync.WaitGroup
	if a.lifecycle != nil {
		a.lifecycle.Start(dutiesCtx)
		wg.Go(func() {
			if a.uninstallWhenRemoved(dutiesCtx) {
				stopDuties() // the audit, lookups and reports have nothing left to serve
			}
		})
	}
	var wake func(string)
	if a.audit != nil {
		wake = a.audit.Wake
	}
	if a.pods != nil {
		wg.Go(func() {
			// Liveness counts from the first list: an API server that
			// does not answer is no reason to restart the agent.
			if !a.pods.Start(dutiesCtx) {
				return
			}
			var duties sync.WaitGroup
			if a.audit != nil {
				duties.Go(func() { a.audit.Run(dutiesCtx, a.beats) })
			}
			if a.missed != nil {
				duties.Go(func() {
					if a.missedFrom.Start(dutiesCtx) {
						a.missed.Run(dutiesCtx)
					}
				})
			}
			duties.Wait()
		})
	}
	if a.taint != nil {
		wg.Go(func() { a.taint.Run(dutiesCtx) })
	}
	if a.sight != nil {
		wg.Go(func() { a.sight.probe(dutiesCtx, probePeriod(a.cfg.AuditInterval), a.probe) })
	}
	// The plugin's reports are best effort: without them the agent still
	// installs, repairs and audits.
	report := a.reportHandler(wake)
	if waitReports, err := a.listenReports(dutiesCtx, report); err != nil {
		a.log.Warn("not listening for the plugin's reports", "error", err.Error())
	} else {
		defer waitReports()
	}
	// Pod lookups from the informer, in the run directory the reports
	// made: the plugin asks the API when this socket does not answer.
	if a.pods != nil {
		if srv, err := lookups.Listen(filepath.Join(a.cfg.Install.RunDir, install.PodsSocket), a.pods.Lookup,
			a.log.With("component", "pod-lookups")); err != nil {
			a.log.Warn("not answering the plugin's pod lookups: it asks the API", "error", err.Error())
		} else {
			if a.audit != nil {
				srv.ReadsBack = a.audit.ReadsBack
				// ADDs the plugin's shim hands over: the audit
				// reads back what they write.
				srv.Add = plugin.AgentSide{Lookup: a.pods.Lookup, ReadsBack: a.audit.ReadsBack,
					NodePath: a.cfg.Install.FromHostRunDir, Now: time.Now,
					Report: report, ReportsSocket: a.reportsSocket()}.RunAdd
			}
			wg.Go(func() { srv.Serve(dutiesCtx) })
		}
	}
	err = a.installer.Run(ctx)
	stopDuties()
	wg.Wait()
	if a.events != nil {
		a.events.flush()
	}
	return err
}

// removedChecks are when, after its DaemonSet or ServiceAccount is seen
// deleted, the agent asks whether istio-cni is gone while it runs: the
// ServiceAccount and the agent's rights go a moment after the DaemonSet.
var removedChecks = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}

// uninstallWhenRemoved uninstalls while the agent runs once the API shows
// istio-cni removed around it (an agent orphaned by --cascade=orphan is
// never stopped, so its shutdown check never runs), and reports whether it
// did.
func (a *Agent) uninstallWhenRemoved(ctx context.Context) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-a.lifecycle.Gone():
		}
		for _, after := range removedChecks {
			t := time.NewTimer(after)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
			if removed, why := a.lifecycle.CheckRunning(ctx); removed {
				a.installer.UninstallNow(why)
				return true
			}
		}
	}
}
