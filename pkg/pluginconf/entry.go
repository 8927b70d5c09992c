// Package pluginconf is istio-cni's entry in a CNI config: the keys the
// plugin reads, their defaults, and the one validation that both the plugin
// (on every verb) and the installer (before it writes the entry) run. A
// value the plugin would refuse would fail every pod's ADD on the node, so
// the installer refuses it first, with the same message.
package pluginconf

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/kube"
)

// Entry holds the plugin's own keys. Field order is the order the installer
// writes them in; unset optional keys are left out.
type Entry struct {
	// Kubeconfig is the file the installer writes for the plugin.
	Kubeconfig string `json:"kubeconfig"`
	// ExcludeNamespaces pass through without an API call.
	ExcludeNamespaces []string `json:"exclude_namespaces"`
	// LogLevel is debug, info, warn or error; LogFile, if set, gets a copy
	// of stderr's log lines.
	LogLevel string `json:"log_level,omitempty"`
	LogFile  string `json:"log_file,omitempty"`
	// IptablesBackend is auto, legacy or nft (see release.Backend).
	IptablesBackend string `json:"iptables_backend,omitempty"`
	// NativeNftables writes pods' rules as upstream's native nftables
	// ruleset (pkg/iptables/nftables) instead of iptables rules, as upstream's
	// native_nftables (global.nativeNftables) does.
	NativeNftables bool `json:"native_nftables,omitempty"`
	// APITimeout bounds a pod lookup with all its retries; APIAttemptTimeout
	// each attempt. Go durations ("20s").
	APITimeout        string `json:"api_timeout,omitempty"`
	APIAttemptTimeout string `json:"api_attempt_timeout,omitempty"`
	// TProxyMark and TProxyRouteTable are the packet mark and the route
	// table of TPROXY-mode pods (istio-iptables' -t and -r); 0 keeps 1337
	// and 133.
	TProxyMark       uint32 `json:"tproxy_mark,omitempty"`
	TProxyRouteTable uint32 `json:"tproxy_route_table,omitempty"`
	// ReportsSocket is the node agent's datagram socket: each ADD, DEL and
	// CHECK outcome is sent there (pkg/wire/reports), best effort. "" sends
	// nothing.
	ReportsSocket string `json:"reports_socket,omitempty"`
	// AgentSocket is reports_socket's name before; read for one release
	// (a node whose conflist an older agent wrote), never written.
	AgentSocket string `json:"agent_socket,omitempty"`
	// PodSocket is the node agent's pod lookup socket (pkg/wire/lookups): ADD
	// asks it first and the API when it cannot answer. "" always asks the
	// API.
	PodSocket string `json:"pod_socket,omitempty"`
	// IPv6Redirect is always (the default) or dual-stack-only: whether a
	// pod with IPv6 whose proxy is not dual-stack gets IPv6 rules
	// (decision.IPv6Policy).
	IPv6Redirect string `json:"ipv6_redirect,omitempty"`
	// RecordsDir is where ADD records the rules it applied to each sandbox
	// (pkg/applied), so the node audit restores exactly those. "" records
	// nothing.
	RecordsDir string `json:"records_dir,omitempty"`
	// CacheDir is where the plugin remembers what it learned of the node
	// (its iptables release, which decides whether ADD may write the
	// rules over netlink). "" remembers nothing and never uses netlink.
	CacheDir string `json:"cache_dir,omitempty"`
}

// PodAnnotationsCapability is the runtime capability that hands the plugin
// the pod's annotations in runtimeConfig (containerd 1.5+, CRI-O).
const PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"

// RuntimeConfig is what the runtime passes for the capabilities the entry
// declares.
type RuntimeConfig struct {
	// PodAnnotations is nil when the runtime passed none (it lacks the
	// capability): then nothing is known of the pod without a lookup.
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
}

// Settings are an entry's values, validated and with defaults applied.
type Values struct {
	LogLevel slog.Level
	Backend  release.Backend
	// Native: pods' rules are native nftables, not iptables.
	Native      bool
	Timeouts    kube.Timeouts
	TProxyMark  uint32
	TProxyTable uint32
	IPv6        decision.IPv6Policy
}

// Node is what the decision needs of the settings.
func (s Values) Node() decision.NodeSettings {
	return decision.NodeSettings{TProxyMark: s.TProxyMark, TProxyTable: s.TProxyTable, IPv6: s.IPv6}
}

// Defaults, in one place.
const (
	DefaultKubeconfig        = "/var/run/istio-cni/istio-cni-sidecar-kubeconfig"
	DefaultAPITimeout        = 20 * time.Second
	DefaultAPIAttemptTimeout = 5 * time.Second
	// MaxAPITimeout keeps a lookup, with the plugin's budget for the pod's
	// namespace after it, below the kubelet's two-minute runtime request
	// timeout (shared with the primary CNI), so a failure is ours to report,
	// not a kubelet timeout.
	MaxAPITimeout = 60 * time.Second
)

// FieldError is a key's value the plugin cannot use: it names the key and
// what is allowed.
type FieldError struct {
	Field, Problem string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Problem) }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Normalize fills defaults into e (an empty kubeconfig becomes
// DefaultKubeconfig) and validates every key; the error is a *FieldError.
func (e *Entry) Normalize() (Values, error) {
	var s Values
	if e.Kubeconfig == "" {
		e.Kubeconfig = DefaultKubeconfig
	}
	var err error
	if e.ReportsSocket == "" {
		e.ReportsSocket, e.AgentSocket = e.AgentSocket, ""
	}
	for _, p := range []struct{ field, path, what string }{
		{"kubeconfig", e.Kubeconfig, "the kubeconfig's path on the host"},
		{"log_file", e.LogFile, "a file path on the host, or empty"},
		{"reports_socket", e.ReportsSocket, "the agent's socket path on the host, or empty"},
		{"pod_socket", e.PodSocket, "the agent's pod lookup socket path on the host, or empty"},
		{"records_dir", e.RecordsDir, "a directory on the host, or empty"},
		{"cache_dir", e.CacheDir, "a directory on the host, or empty"},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return s, invalid(p.field, "%q is not an absolute path: want %s", p.path, p.what)
		}
	}
	if s.LogLevel, err = ParseLevel(e.LogLevel); err != nil {
		return s, invalid("log_level", "%v", err)
	}
	if s.IPv6, err = decision.ParseIPv6Policy(e.IPv6Redirect); err != nil {
		return s, invalid("ipv6_redirect", "%v", err)
	}
	if s.Backend, err = release.ParseBackend(e.IptablesBackend); err != nil {
		return s, invalid("iptables_backend", "%v", err)
	}
	if s.Native = e.NativeNftables; s.Native && s.Backend != release.Auto {
		return s, invalid("iptables_backend", "%q with native_nftables: pods' rules are native nftables then, written by no iptables: leave iptables_backend unset (or auto), or set native_nftables to false", s.Backend)
	}
	if s.Native && s.IPv6 == decision.IPv6DualStackOnly {
		// One inet table captures both families: IPv6 cannot be left
		// to go direct, as dual-stack-only promises.
		return s, invalid("ipv6_redirect", "%q with native_nftables: upstream's native rules capture IPv6 with IPv4 in one inet table, so it cannot go direct: use always, or set native_nftables to false", s.IPv6)
	}
	if s.Timeouts.Total, err = parseDuration(e.APITimeout, DefaultAPITimeout, MaxAPITimeout); err != nil {
		return s, invalid("api_timeout", "%v", err)
	}
	if s.Timeouts.Attempt, err = parseDuration(e.APIAttemptTimeout, DefaultAPIAttemptTimeout, s.Timeouts.Total); err != nil {
		return s, invalid("api_attempt_timeout", "%v (at most api_timeout)", err)
	}
	for _, ns := range e.ExcludeNamespaces {
		if !kube.ValidNamespace(ns) {
			return s, invalid("exclude_namespaces", "%s", notNamespace(ns))
		}
	}
	if s.TProxyMark = e.TProxyMark; s.TProxyMark == 0 {
		s.TProxyMark = iptables.DefaultTProxyMark
	}
	if s.TProxyMark == iptables.OutboundMark {
		return s, invalid("tproxy_mark", "%d is the proxy's outbound mark: want another mark from 1 to 4294967295", iptables.OutboundMark)
	}
	if s.TProxyTable = e.TProxyRouteTable; s.TProxyTable == 0 {
		s.TProxyTable = iptables.DefaultTProxyTable
	}
	// 253-255 are the kernel's default, main and local tables; above them
	// (and 0) is unspecified.
	if s.TProxyTable >= 253 && s.TProxyTable <= 255 || s.TProxyTable == 0xffffffff {
		return s, invalid("tproxy_route_table", "%d is a kernel table: want 1 to 252 or 256 to 4294967294", s.TProxyTable)
	}
	return s, nil
}

func notNamespace(s string) string {
	return fmt.Sprintf("%q is not a namespace name: want 1 to 63 lower-case letters, digits and '-'", s)
}

// ParseLevel reads a log level; "" is info.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level %q: want debug, info, warn or error", s)
}

func parseDuration(s string, def, maxD time.Duration) (time.Duration, error) {
	if s == "" {
		return min(def, maxD), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxD {
		return 0, fmt.Errorf("%q: want a duration such as \"20s\", above 0 and at most %s", s, maxD)
	}
	return d, nil
}
