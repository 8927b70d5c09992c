package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/audit"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/install"
	"istio-cni.local/istio-cni/pkg/nodetaint"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/podns"
	"istio-cni.local/istio-cni/pkg/xtables"
)

// nodeDuties are the agent's work beyond the files, all through the API:
// the node audit and the startup taint.
type nodeDuties struct {
	audit *audit.Auditor
	pods  *audit.NodePods
	taint *nodetaint.Controller
	stop  func() // flushes Events
}

// newNodeDuties builds what the configuration turns on.
func newNodeDuties(cfg install.Config, rc *rest.Config, in *install.Installer, reg prometheus.Registerer, log *slog.Logger) (*nodeDuties, error) {
	d := &nodeDuties{stop: func() {}}
	if cfg.AuditAction == audit.Off && !cfg.NodeTaint {
		return d, nil
	}
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("--node-name: required (NODE_NAME from the downward API spec.nodeName) for the node audit and the taint; or set --audit-action=off and --node-taint=false")
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if cfg.AuditAction != audit.Off {
		rec, stop := audit.NewRecorder(cs, cfg.NodeName)
		d.stop = stop
		d.audit = audit.New(audit.Config{
			Node: cfg.NodeName, Action: cfg.AuditAction, Interval: cfg.AuditInterval, Confirm: cfg.AuditConfirm,
			ExcludeNamespaces: cfg.ExcludeNamespaces, AgentNamespace: cfg.PodNamespace,
			Settings: decision.DefaultNodeSettings(),
		}, audit.Deps{
			Namespaces: podns.Finder{Proc: cfg.HostProc},
			Network:    &podnet.Netns{Programmer: &xtables.Programmer{Runner: xtables.RootRunner{Root: cfg.HostRoot}, Backend: xtables.Auto}},
			Actions:    audit.APIActions{Client: cs},
			Events:     rec,
			Metrics:    audit.NewMetrics(reg),
			Log:        log.With("component", "audit"),
		})
		if d.pods, err = audit.NewNodePods(cs, cfg.NodeName, d.audit.Wake); err != nil {
			return nil, err
		}
		d.audit.SetPods(d.pods)
	}
	if cfg.NodeTaint {
		tainted := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "istio_cni_node_tainted",
			Help: "1 while this node carries " + nodetaint.Key + " as last set or seen by the agent.",
		})
		reg.MustRegister(tainted)
		d.taint = &nodetaint.Controller{Client: cs, Node: cfg.NodeName, Ready: in, Grace: cfg.TaintGrace,
			Exempt: install.ShutdownReason, Log: log.With("component", "taint"), Tainted: tainted}
	}
	return d, nil
}

// start runs the duties until ctx ends; wait returns once they stopped.
func (d *nodeDuties) start(ctx context.Context, log *slog.Logger) (wait func()) {
	var wg sync.WaitGroup
	if d.audit != nil {
		wg.Go(func() {
			if !d.pods.Start(ctx) {
				return // ctx ended first
			}
			d.audit.Run(ctx)
		})
	}
	if d.taint != nil {
		wg.Go(func() { d.taint.Run(ctx) })
	}
	log.Debug("node duties started", "audit", d.audit != nil, "taint", d.taint != nil)
	return func() {
		wg.Wait()
		d.stop()
	}
}
