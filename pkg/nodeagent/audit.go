package nodeagent

import (
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/audit"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/install"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/podns"
	"istio-cni.local/istio-cni/pkg/xtables"
)

// newAudit wires the node audit to the node: its pods through an informer,
// their namespaces through the node's /proc, their rules through the node's
// own iptables, run chrooted into its root.
func newAudit(cfg Config, cs kubernetes.Interface, rec record.EventRecorder, reg prometheus.Registerer,
	log *slog.Logger) (*audit.Auditor, *audit.NodePods, error) {
	a := audit.New(audit.Config{
		Node: cfg.NodeName, Action: cfg.AuditAction, Interval: cfg.AuditInterval, Confirm: cfg.AuditConfirm,
		ExcludeNamespaces: cfg.Install.ExcludeNamespaces, AgentNamespace: cfg.Install.PodNamespace,
		Settings: nodeSettings(cfg), LabelKey: cfg.AuditLabelKey, LabelValue: cfg.AuditLabelValue,
	}, audit.Deps{
		Namespaces: podns.Finder{Proc: cfg.HostProc},
		Network:    &podnet.Netns{Programmer: &xtables.Programmer{Runner: xtables.RootRunner{Root: cfg.HostRoot}, Backend: xtables.Auto}},
		Records:    applied.Store{Dir: filepath.Join(cfg.Install.KubeconfigDir, install.RecordsDirName)},
		Actions:    audit.APIActions{Client: cs},
		Events:     rec,
		Metrics:    audit.NewMetrics(reg),
		Log:        log,
	})
	pods, err := audit.NewNodePods(cs, cfg.NodeName, a.Wake)
	if err != nil {
		return nil, nil, err
	}
	a.SetPods(pods)
	return a, pods, nil
}

// nodeSettings are the plugin's node-wide settings as the installer writes
// them into its entry: its defaults, and ipv6_redirect.
func nodeSettings(cfg Config) decision.NodeSettings {
	s := decision.DefaultNodeSettings()
	if cfg.Install.IPv6Redirect != "" {
		s.IPv6 = cfg.Install.IPv6Redirect
	}
	return s
}
