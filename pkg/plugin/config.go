package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/xtables"
)

// Config is the plugin's entry in the conflist. Unknown fields are ignored.
type Config struct {
	types.NetConf

	// Kubeconfig is the file the installer writes for the plugin.
	Kubeconfig string `json:"kubeconfig"`
	// ExcludeNamespaces pass through without an API call.
	ExcludeNamespaces []string `json:"exclude_namespaces"`
	// AgentNamespace is the istio-cni DaemonSet's namespace. Its pods pass
	// through before any client is built, so the agent can always start even
	// when the plugin cannot reach the API (it is what repairs that).
	AgentNamespace string `json:"agent_namespace"`
	// LogLevel is debug, info, warn or error; LogFile, if set, gets a copy
	// of stderr's log lines.
	LogLevel string `json:"log_level"`
	LogFile  string `json:"log_file"`
	// IptablesBackend is auto, legacy or nft (see xtables.Backend).
	IptablesBackend string `json:"iptables_backend"`
	// APITimeout bounds a pod lookup with all its retries; APIAttemptTimeout
	// each attempt. Go durations ("20s").
	APITimeout        string `json:"api_timeout"`
	APIAttemptTimeout string `json:"api_attempt_timeout"`
	// TProxyMark and TProxyRouteTable are the packet mark and the route
	// table of TPROXY-mode pods (istio-iptables' -t and -r); 0 keeps 1337
	// and 133.
	TProxyMark       uint32 `json:"tproxy_mark"`
	TProxyRouteTable uint32 `json:"tproxy_route_table"`
	// AgentSocket is the node agent's datagram socket: each ADD, DEL and
	// CHECK outcome is sent there (pkg/agentevents), best effort. "" sends
	// nothing.
	AgentSocket string `json:"agent_socket"`

	// Parsed values.
	logLevel slog.Level
	backend  xtables.Backend
	timeouts kube.Timeouts
}

// Defaults, in one place.
const (
	DefaultKubeconfig        = "/var/run/istio-cni/istio-cni-kubeconfig"
	DefaultAPITimeout        = 20 * time.Second
	DefaultAPIAttemptTimeout = 5 * time.Second
	// maxAPITimeout keeps a lookup, with opBudget after it, below the
	// kubelet's two-minute runtime request timeout (shared with the primary
	// CNI), so a failure is ours to report, not a kubelet timeout.
	maxAPITimeout = 60 * time.Second
)

const errPrefix = "istio-cni config"

// parseConfig reads and validates the plugin's configuration and prevResult.
func parseConfig(stdin []byte) (*Config, error) {
	conf := Config{}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalid(te.Field, fmt.Sprintf("got JSON %s, want %s", te.Value, jsonKind(te.Type.Kind().String())))
		}
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: decoding: %v", errPrefix, err), "")
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: prevResult: %v", errPrefix, err), "")
	}
	if conf.Kubeconfig == "" {
		conf.Kubeconfig = DefaultKubeconfig
	}
	var err error
	if conf.logLevel, err = parseLevel(conf.LogLevel); err != nil {
		return nil, invalid("log_level", err.Error())
	}
	if conf.backend, err = xtables.ParseBackend(conf.IptablesBackend); err != nil {
		return nil, invalid("iptables_backend", err.Error())
	}
	if conf.timeouts.Total, err = parseDuration(conf.APITimeout, DefaultAPITimeout, maxAPITimeout); err != nil {
		return nil, invalid("api_timeout", err.Error())
	}
	if conf.timeouts.Attempt, err = parseDuration(conf.APIAttemptTimeout, DefaultAPIAttemptTimeout, conf.timeouts.Total); err != nil {
		return nil, invalid("api_attempt_timeout", err.Error()+" (at most api_timeout)")
	}
	for _, ns := range conf.ExcludeNamespaces {
		if !kube.ValidNamespace(ns) {
			return nil, invalid("exclude_namespaces", notNamespace(ns))
		}
	}
	if conf.AgentNamespace != "" && !kube.ValidNamespace(conf.AgentNamespace) {
		return nil, invalid("agent_namespace", notNamespace(conf.AgentNamespace))
	}
	if conf.AgentSocket != "" && !filepath.IsAbs(conf.AgentSocket) {
		return nil, invalid("agent_socket", fmt.Sprintf("%q is not an absolute path: want the agent's socket path on the host, or empty", conf.AgentSocket))
	}
	if conf.TProxyMark == 0 {
		conf.TProxyMark = iptables.DefaultTProxyMark
	}
	if conf.TProxyMark == iptables.OutboundMark {
		return nil, invalid("tproxy_mark", fmt.Sprintf("%d is the proxy's outbound mark: want another mark from 1 to 4294967295", iptables.OutboundMark))
	}
	if conf.TProxyRouteTable == 0 {
		conf.TProxyRouteTable = iptables.DefaultTProxyTable
	}
	// 253-255 are the kernel's default, main and local tables; above them
	// (and 0) is unspecified.
	if conf.TProxyRouteTable >= 253 && conf.TProxyRouteTable <= 255 || conf.TProxyRouteTable == 0xffffffff {
		return nil, invalid("tproxy_route_table", fmt.Sprintf("%d is a kernel table: want 1 to 252 or 256 to 4294967294", conf.TProxyRouteTable))
	}
	return &conf, nil
}

func notNamespace(s string) string {
	return fmt.Sprintf("%q is not a namespace name: want 1 to 63 lower-case letters, digits and '-'", s)
}

func invalid(field, problem string) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: field %q: %s", errPrefix, field, problem), "")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "slice":
		return "an array of strings"
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

func parseLevel(s string) (slog.Level, error) {
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
