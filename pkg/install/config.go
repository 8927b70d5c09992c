// Package install keeps istio-cni installed on a node: the plugin binary,
// its kubeconfig and the chained conflist, repaired as soon as something
// undoes them, and removed when the DaemonSet is uninstalled.
package install

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/audit"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodetaint"
)

// Mode is how the conflist is installed.
type Mode string

const (
	// Owned writes our own conflist, a copy of the primary's with our entry,
	// named to sort before it; the primary's file is never touched.
	Owned Mode = "owned"
	// Inplace inserts our entry into the primary's own file (upstream's
	// older behaviour).
	Inplace Mode = "inplace"
)

// Config is the installer's configuration. Every flag can also be set by
// the environment variable named in its usage; a flag on the command line
// wins.
type Config struct {
	CNIBinDir          string
	PluginSource       string
	CNINetDir          string
	KubeconfigDir      string
	HostKubeconfigPath string
	ServiceAccountDir  string
	APIHost, APIPort   string
	OwnedConfigName    string
	ExcludeNamespaces  []string
	LogLevel           slog.Level
	HealthAddr         string
	MetricsAddr        string
	Mode               Mode
	// PodNamespace and DaemonSetName identify the agent's own DaemonSet:
	// its namespace is passed to the plugin as agent_namespace, and at
	// shutdown the DaemonSet's state tells uninstall from restart.
	PodNamespace  string
	DaemonSetName string
	// PluginServiceAccount, in PodNamespace, is the plugin's own identity:
	// the installer mints its tokens (PluginTokenTTL long) for the plugin's
	// kubeconfig. Empty: the kubeconfig carries the installer's own token.
	PluginServiceAccount string
	PluginTokenTTL       time.Duration
	// ConflictRepairs repairs within ConflictWindow mean another writer keeps
	// undoing us: stop fighting and report it.
	ConflictRepairs int
	ConflictWindow  time.Duration

	// The agent's duties beyond the files (see cmd/install-cni): the node
	// audit, the startup taint. They need API access and NodeName.
	NodeName      string
	AuditAction   audit.Action
	AuditInterval time.Duration
	AuditConfirm  time.Duration
	// HostProc is the node's /proc (pods' network namespaces); HostRoot
	// the node's root filesystem, whose iptables the audit runs.
	HostProc, HostRoot string
	NodeTaint          bool
	TaintGrace         time.Duration
}

// KubeconfigName is the plugin kubeconfig's file name in KubeconfigDir.
const KubeconfigName = "istio-cni-kubeconfig"

// EventsSocket is the agent's socket for the plugin's reports, in
// KubeconfigDir (the host directory of the kubeconfig).
const EventsSocket = "events.sock"

// PluginBinary is the plugin's file name in PluginSource and CNIBinDir.
const PluginBinary = "istio-cni"

// ParseFlags reads the configuration from args and the environment.
// selfDir is the directory holding the installer's own binary, the default
// plugin source.
func ParseFlags(args []string, getenv func(string) string, selfDir string) (Config, error) {
	var c Config
	var exclude, level, mode string
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	str := func(p *string, name, env, def, usage string) {
		if v := getenv(env); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+env+")")
	}
	str(&c.CNIBinDir, "cni-bin-dir", "CNI_BIN_DIR", "/host/opt/cni/bin", "where the plugin is installed")
	str(&c.PluginSource, "plugin-source", "PLUGIN_SOURCE", selfDir, "directory holding the plugin binary "+PluginBinary+" in the image")
	str(&c.CNINetDir, "cni-net-dir", "CNI_NET_DIR", "/host/etc/cni/net.d", "the node's CNI config directory")
	str(&c.KubeconfigDir, "kubeconfig-dir", "KUBECONFIG_DIR", "/host/var/run/istio-cni", "where the plugin's kubeconfig is written")
	str(&c.HostKubeconfigPath, "host-kubeconfig-path", "HOST_KUBECONFIG_PATH", "/var/run/istio-cni/"+KubeconfigName, "the kubeconfig's path as the plugin sees it on the host")
	str(&c.ServiceAccountDir, "service-account-dir", "SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount", "the installer's service-account token and CA")
	str(&c.OwnedConfigName, "owned-config-name", "OWNED_CONFIG_NAME", "02-istio-cni.conflist", "preferred name of the owned conflist")
	str(&exclude, "exclude-namespaces", "EXCLUDE_NAMESPACES", "kube-system", "comma-separated namespaces the plugin never redirects")
	str(&level, "log-level", "LOG_LEVEL", "info", "debug, info, warn or error (also passed to the plugin)")
	str(&c.HealthAddr, "health-addr", "HEALTH_ADDR", ":8000", "address of /healthz and /readyz")
	str(&c.MetricsAddr, "metrics-addr", "METRICS_ADDR", ":15014", "address of /metrics")
	str(&mode, "mode", "MODE", string(Owned), "owned or inplace")
	str(&c.PodNamespace, "pod-namespace", "POD_NAMESPACE", "", "the agent's namespace (downward API; required)")
	str(&c.DaemonSetName, "daemonset-name", "DAEMONSET_NAME", "istio-cni-node", "the agent's DaemonSet")
	str(&c.PluginServiceAccount, "plugin-service-account", "PLUGIN_SERVICE_ACCOUNT", "", "ServiceAccount (in the agent's namespace) whose tokens the plugin's kubeconfig carries; empty: the installer's own")
	str(&c.NodeName, "node-name", "NODE_NAME", "", "this node's name (downward API spec.nodeName); required for the audit and the taint")
	str(&c.HostProc, "host-proc", "HOST_PROC", "/host/proc", "the node's /proc, where the audit finds pods' network namespaces")
	str(&c.HostRoot, "host-root", "HOST_ROOT", "/host/root", "the node's root filesystem, whose iptables the audit runs (chrooted); / on the node itself")
	var repairs, window, ttl, action, interval, confirm, taint, grace string
	str(&action, "audit-action", "AUDIT_ACTION", string(audit.Repair), "what the node audit does with a meshed pod running unredirected: "+audit.Actions)
	str(&interval, "audit-interval", "AUDIT_INTERVAL", "30s", "period of the audit's full pass (1s to 1h); pod changes are checked at once")
	str(&confirm, "audit-confirm", "AUDIT_CONFIRM", "3s", "how long a pod must stay unredirected before the audit acts (0 to 1m)")
	str(&taint, "node-taint", "NODE_TAINT", "false", "remove "+nodetaint.Key+" from this node once ready, put it back when readiness is lost (true or false)")
	str(&grace, "taint-grace", "TAINT_GRACE", "10s", "how long readiness may be lost before the taint goes back (1s to 10m)")
	str(&ttl, "plugin-token-ttl", "PLUGIN_TOKEN_TTL", "1h", "lifetime of the plugin's minted tokens (10m to 24h); renewed at 80%")
	str(&repairs, "conflict-repairs", "CONFLICT_REPAIRS", "10", "repairs within --conflict-window that mean another writer is fighting us")
	str(&window, "conflict-window", "CONFLICT_WINDOW", "30s", "see --conflict-repairs")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	var err error
	if c.ConflictRepairs, err = strconv.Atoi(repairs); err != nil || c.ConflictRepairs < 2 {
		return Config{}, fmt.Errorf("--conflict-repairs %q: want a whole number of at least 2", repairs)
	}
	if c.ConflictWindow, err = time.ParseDuration(window); err != nil || c.ConflictWindow <= 0 {
		return Config{}, fmt.Errorf("--conflict-window %q: want a duration such as 30s", window)
	}
	if c.PluginTokenTTL, err = time.ParseDuration(ttl); err != nil || c.PluginTokenTTL < MinPluginTokenTTL || c.PluginTokenTTL > MaxPluginTokenTTL {
		return Config{}, fmt.Errorf("--plugin-token-ttl %q: want a duration from 10m to 24h", ttl)
	}
	if c.AuditAction, err = audit.ParseAction(action); err != nil {
		return Config{}, fmt.Errorf("--audit-action: %w", err)
	}
	if c.AuditInterval, err = time.ParseDuration(interval); err != nil || c.AuditInterval < time.Second || c.AuditInterval > time.Hour {
		return Config{}, fmt.Errorf("--audit-interval %q: want a duration from 1s to 1h", interval)
	}
	if c.AuditConfirm, err = time.ParseDuration(confirm); err != nil || c.AuditConfirm < 0 || c.AuditConfirm > time.Minute {
		return Config{}, fmt.Errorf("--audit-confirm %q: want a duration from 0s to 1m", confirm)
	}
	if c.NodeTaint, err = strconv.ParseBool(taint); err != nil {
		return Config{}, fmt.Errorf("--node-taint %q: want true or false", taint)
	}
	if c.TaintGrace, err = time.ParseDuration(grace); err != nil || c.TaintGrace < time.Second || c.TaintGrace > 10*time.Minute {
		return Config{}, fmt.Errorf("--taint-grace %q: want a duration from 1s to 10m", grace)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.APIHost, c.APIPort = getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	c.Mode = Mode(mode)
	if exclude != "" {
		c.ExcludeNamespaces = strings.Split(exclude, ",")
	}
	// Event paths are compared with these: they must be clean.
	for _, p := range []*string{&c.CNIBinDir, &c.PluginSource, &c.CNINetDir, &c.KubeconfigDir, &c.ServiceAccountDir, &c.HostKubeconfigPath, &c.HostProc, &c.HostRoot} {
		if *p != "" {
			*p = filepath.Clean(*p)
		}
	}
	if c.LogLevel, err = parseLevel(level); err != nil {
		return Config{}, err
	}
	return c, c.validate()
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// validate checks every flag; the error names the flag and what is allowed.
func (c Config) validate() error {
	var errs []error
	paths := []flagValue{{"--cni-bin-dir", c.CNIBinDir}, {"--cni-net-dir", c.CNINetDir},
		{"--kubeconfig-dir", c.KubeconfigDir}, {"--service-account-dir", c.ServiceAccountDir},
		{"--plugin-source", c.PluginSource}, {"--host-kubeconfig-path", c.HostKubeconfigPath}}
	watched := map[string]string{}
	for i, p := range paths {
		if !filepath.IsAbs(p.value) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", p.flag, p.value))
		}
		if other, dup := watched[p.value]; dup && i < 4 {
			errs = append(errs, fmt.Errorf("%s and %s are the same directory %q: want distinct directories", other, p.flag, p.value))
		}
		watched[p.value] = p.flag
	}
	for _, p := range []flagValue{{"--host-proc", c.HostProc}, {"--host-root", c.HostRoot}} {
		if !filepath.IsAbs(p.value) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", p.flag, p.value))
		}
	}
	if c.NodeName != "" && !validObjectName(c.NodeName) {
		errs = append(errs, fmt.Errorf("--node-name %q: want a node name (lower-case letters, digits, '-' and '.')", c.NodeName))
	}
	if filepath.Base(c.HostKubeconfigPath) != KubeconfigName {
		errs = append(errs, fmt.Errorf("--host-kubeconfig-path %q: the file is written as %s, so the path must end in it", c.HostKubeconfigPath, KubeconfigName))
	}
	name := c.OwnedConfigName
	if name != filepath.Base(name) || !strings.HasSuffix(name, ".conflist") || strings.HasPrefix(name, ".") {
		errs = append(errs, fmt.Errorf("--owned-config-name %q: want a file name ending in .conflist", name))
	}
	for _, ns := range c.ExcludeNamespaces {
		if !kube.ValidNamespace(ns) {
			errs = append(errs, fmt.Errorf("--exclude-namespaces: %q is not a namespace name: want 1 to 63 lower-case letters, digits and '-', comma-separated", ns))
		}
	}
	// The agent's own namespace tells uninstall from restart and keeps its
	// pods out of the plugin's way: an empty one would make every restart
	// look like an uninstall.
	if !kube.ValidNamespace(c.PodNamespace) {
		errs = append(errs, fmt.Errorf("--pod-namespace %q: required (POD_NAMESPACE from the downward API): want 1 to 63 lower-case letters, digits and '-'", c.PodNamespace))
	}
	if !validObjectName(c.DaemonSetName) {
		errs = append(errs, fmt.Errorf("--daemonset-name %q: want a DNS subdomain name (lower-case letters, digits, '-' and '.')", c.DaemonSetName))
	}
	if c.PluginServiceAccount != "" && !validObjectName(c.PluginServiceAccount) {
		errs = append(errs, fmt.Errorf("--plugin-service-account %q: want a ServiceAccount name (lower-case letters, digits, '-' and '.'), or empty", c.PluginServiceAccount))
	}
	if c.Mode != Owned && c.Mode != Inplace {
		errs = append(errs, fmt.Errorf("--mode %q: want owned or inplace", c.Mode))
	}
	for _, a := range []flagValue{{"--health-addr", c.HealthAddr}, {"--metrics-addr", c.MetricsAddr}} {
		if _, _, err := net.SplitHostPort(a.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port or :port", a.flag, a.value))
		}
	}
	return errors.Join(errs...)
}

type flagValue struct{ flag, value string }

// validObjectName: a DNS-1123 subdomain, as Kubernetes names most objects.
func validObjectName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !kube.ValidNamespace(label) {
			return false
		}
	}
	return true
}
