package nodeagent

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/childcaps"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/nodeagent/podcache"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// newAudit wires the node audit to the node: its pods through an informer,
// their namespaces through the node's netns directory, their rules through
// the image's iptables (both backends) with the backend ADD used.
func newAudit(cfg Config, cs kubeclient.Interface, pods *podcache.Pods, rec record.EventRecorder, reg prometheus.Registerer,
	log *slog.Logger) *audit.Auditor {
	// The agent keeps CAP_SYS_ADMIN for setns; the iptables it runs get
	// only what iptables needs.
	if err := childcaps.Limit(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW); err != nil {
		log.Warn("the programs the audit runs keep all the agent's capabilities", "err", err)
	}
	backend := cfg.Backend
	if backend == release.Auto {
		backend = xtables.Detect(context.Background(), xtables.ExecRunner{})
		log.Info("the node's iptables backend, from the host's rules", "backend", string(backend))
	}
	// A state of a pod's rules iptables-save has printed as its model is
	// read back over netlink (legacy: with one read a table) after that:
	// one socket, not a process a pod.
	confirmed := xtables.NewConfirmed(nfnl.ReadFingerprint, legacy.Holds)
	metrics := audit.NewMetrics(reg)
	metrics.Interval.Set(cfg.AuditInterval.Seconds())
	return audit.New(audit.Config{
		Node: cfg.NodeName, Action: cfg.AuditAction, Interval: cfg.AuditInterval, Confirm: cfg.AuditConfirm,
		ExcludeNamespaces: cfg.Install.ExcludeNamespaces,
		Settings:          nodeSettings(cfg), LabelKey: cfg.AuditLabelKey, LabelValue: cfg.AuditLabelValue,
		Writer:              applied.Writer{Backend: backend, Native: cfg.Install.NativeNftables},
		ValidationContainer: cfg.ValidationContainer,
	}, audit.Deps{
		Namespaces: netnsdir.NewFinder(cfg.Install.NetnsDir, time.Now()),
		Network:    func(w applied.Writer) audit.Network { return repairNetwork(cfg, w, confirmed) },
		Pods:       pods,
		Records:    applied.Store{Dir: filepath.Join(cfg.Install.RunDir, install.RecordsDirName), Cache: applied.NewCache()},
		Actions:    audit.APIActions{Client: cs},
		Events:     rec,
		Metrics:    metrics,
		Log:        log,
	})
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

// repairNetwork reads and repairs a sandbox's rules as w says ADD wrote
// them, with the image's iptables, and writes a repair as the node's own
// iptables-nft would (nodeLayouts).
func repairNetwork(cfg Config, w applied.Writer, confirmed *xtables.Confirmed) *podnet.Network {
	n := podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}, Confirmed: confirmed})
	n.Layouts = nodeLayouts(filepath.Join(cfg.Install.RunDir, install.CacheDirName))
	return n
}

// nodeLayouts is how the node's own iptables-nft lays out each family's
// rules, from the release the plugin remembered in cacheDir: a repair
// writes so, never in the image's release's encoding, which the node's
// iptables-save can misprint (1.8.7's prints 1.8.9's --dport as
// nothing). It is read at each repair: the plugin remembers the release
// at its first ADD on the node, which may come after the agent starts.
func nodeLayouts(cacheDir string) func(iptables.Family) (nfnl.Layout, bool) {
	return func(f iptables.Family) (nfnl.Layout, bool) {
		return nfnl.LayoutOf(release.Recalled(cacheDir, f == iptables.IPv6))
	}
}
