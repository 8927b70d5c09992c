// Package nodeagent is the istio-cni DaemonSet's process on every node: it
// runs the installer (pkg/nodeagent/install), and, with API access, the node audit
// (pkg/nodeagent/audit), the startup taint (pkg/nodeagent/taint), the plugin's reports
// (pkg/wire/reports) and the uninstall check (pkg/nodeagent/lifecycle); it serves
// /readyz, /healthz and /metrics. Its subcommands explain one pod
// (inspect) and clean a node whose agent is gone (uninstall).
package nodeagent

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
)

// Config is the agent's configuration: the installer's, and the agent's
// own duties.
type Config struct {
	Install install.Config

	HealthAddr  string
	MetricsAddr string
	// DaemonSetName and ServiceAccount are the agent's own objects, in
	// Install.PodNamespace: what the uninstall check follows.
	DaemonSetName  string
	ServiceAccount string

	NodeName      string
	AuditAction   audit.Action
	AuditInterval time.Duration
	AuditConfirm  time.Duration
	// AuditLabelKey=AuditLabelValue is what the label action sets.
	AuditLabelKey, AuditLabelValue string
	// ValidationContainer is the injector's validation init container.
	ValidationContainer string
	// Backend is the iptables implementation the audit uses where a
	// sandbox's record does not name ADD's: auto detects the node's from
	// the host's rules.
	Backend    release.Backend
	NodeTaint  bool
	TaintGrace time.Duration
	// TaintKey is the startup taint's key (istiod's taint.name).
	TaintKey string
	// MissedInjection is what the agent does with a pod that missed its
	// sidecar injection; MissedRestartsPerMinute bounds the restarts.
	MissedInjection         missed.Mode
	MissedRestartsPerMinute int
	// IstioNamespace holds the injectors' ConfigMaps whose webhooks reach
	// istiod by URL (no Service to name the namespace).
	IstioNamespace string
}

// ParseFlags reads the configuration from args and the environment (each
// flag defaults to the variable its usage names). selfDir holds the
// agent's own binary, the default plugin source.
func ParseFlags(args []string, getenv func(string) string, selfDir string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	installConfig := install.BindFlags(fs, getenv, selfDir)
	f := envflag.Set{FS: fs, Getenv: getenv}
	var raw agentFlags
	health, metrics := bindEndpointAddrs(f)
	f.String(&c.DaemonSetName, "daemonset-name", "DAEMONSET_NAME", "istio-cni-node", "the agent's DaemonSet")
	f.String(&c.ServiceAccount, "service-account", "SERVICE_ACCOUNT", "istio-cni", "the agent's ServiceAccount (downward API spec.serviceAccountName)")
	f.String(&c.NodeName, "node-name", "NODE_NAME", "", "this node's name (downward API spec.nodeName); required for the audit and the taint")
	f.String(&raw.action, "audit-action", "AUDIT_ACTION", string(audit.Repair), "what the node audit does with a meshed pod running unredirected: "+audit.Actions)
	f.String(&raw.interval, "audit-interval", "AUDIT_INTERVAL", "30s", "period of the audit's full pass (1s to 1h); pod changes are checked at once")
	f.String(&raw.confirm, "audit-confirm", "AUDIT_CONFIRM", "3s", "how long a pod must stay unredirected before the audit acts (0 to 1m)")
	f.String(&c.AuditLabelKey, "audit-label-key", "AUDIT_LABEL_KEY", audit.DefaultLabelKey, "the label the label action sets")
	f.String(&c.AuditLabelValue, "audit-label-value", "AUDIT_LABEL_VALUE", audit.DefaultLabelValue, "its value")
	f.String(&c.ValidationContainer, "validation-container", "VALIDATION_CONTAINER", audit.DefaultValidationContainer, "the init container Istio's injector adds to check a pod's redirect; its failure (exit 126) marks a pod started without it")
	f.String(&raw.nodeTaint, "node-taint", "NODE_TAINT", "false", "remove the startup taint (--taint-key) from this node once ready, put it back when readiness is lost (true or false)")
	f.String(&c.TaintKey, "taint-key", "TAINT_KEY", taint.DefaultKey, "the startup taint's key, with effect NoSchedule: nodes register with it (kubelet --register-with-taints=KEY=:NoSchedule); the same key as istiod's taint.name")
	f.String(&raw.grace, "taint-grace", "TAINT_GRACE", "10s", "how long readiness may be lost before the taint goes back (1s to 10m)")
	f.String(&raw.missedMode, "missed-injection", "MISSED_INJECTION", string(missed.Report), "what the agent does with a running pod that Istio's injector should have given a sidecar but did not: "+missed.Modes+" (restart evicts a ReplicaSet's or StatefulSet's pod once per owner revision; needs optional/audit-pod-writes.yaml)")
	f.String(&raw.missedRate, "missed-injection-restarts-per-minute", "MISSED_INJECTION_RESTARTS_PER_MINUTE", "5", "at most this many such pods evicted per minute across the cluster, all nodes' agents together (1 to 60)")
	istioNamespace := bindIstioNamespace(f)
	backend := bindIptablesBackend(f)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.HealthAddr, c.MetricsAddr = *health, *metrics
	var errs []error
	var err error
	if c.Install, err = installConfig(); err != nil {
		errs = append(errs, err)
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	errs = append(errs, raw.parse(&c)...)
	if c.IstioNamespace, err = istioNamespace(); err != nil {
		errs = append(errs, err)
	}
	if c.Backend, err = backend(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validate())
	return c, errors.Join(errs...)
}

// agentFlags are the agent's own flags that are parsed, as given.
type agentFlags struct {
	action, interval, confirm, nodeTaint, grace, missedMode, missedRate string
}

// parse sets c's fields from r; the errors name the flag.
func (r agentFlags) parse(c *Config) []error {
	var errs []error
	var err error
	if c.AuditAction, err = audit.ParseAction(r.action); err != nil {
		errs = append(errs, fmt.Errorf("--audit-action: %w", err))
	}
	if c.AuditInterval, err = time.ParseDuration(r.interval); err != nil || c.AuditInterval < time.Second || c.AuditInterval > time.Hour {
		errs = append(errs, fmt.Errorf("--audit-interval %q: want a duration from 1s to 1h", r.interval))
	}
	if c.AuditConfirm, err = time.ParseDuration(r.confirm); err != nil || c.AuditConfirm < 0 || c.AuditConfirm > time.Minute {
		errs = append(errs, fmt.Errorf("--audit-confirm %q: want a duration from 0s to 1m", r.confirm))
	}
	if c.NodeTaint, err = strconv.ParseBool(r.nodeTaint); err != nil {
		errs = append(errs, fmt.Errorf("--node-taint %q: want true or false", r.nodeTaint))
	}
	if c.TaintGrace, err = time.ParseDuration(r.grace); err != nil || c.TaintGrace < time.Second || c.TaintGrace > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--taint-grace %q: want a duration from 1s to 10m", r.grace))
	}
	if c.MissedInjection, err = missed.ParseMode(r.missedMode); err != nil {
		errs = append(errs, fmt.Errorf("--missed-injection: %w", err))
	}
	if c.MissedRestartsPerMinute, err = strconv.Atoi(r.missedRate); err != nil || c.MissedRestartsPerMinute < 1 || c.MissedRestartsPerMinute > 60 {
		errs = append(errs, fmt.Errorf("--missed-injection-restarts-per-minute %q: want a whole number from 1 to 60", r.missedRate))
	}
	return errs
}

// bindEndpointAddrs binds the agent's --health-addr and --metrics-addr:
// where the agent serves them, and where inspect --node asks.
func bindEndpointAddrs(f envflag.Set) (health, metrics *string) {
	health, metrics = new(string), new(string)
	f.String(health, "health-addr", "HEALTH_ADDR", ":8000", "address of /healthz and /readyz")
	f.String(metrics, "metrics-addr", "METRICS_ADDR", ":15014", "address of /metrics")
	return health, metrics
}

// bindIstioNamespace declares --istio-namespace for the agent and inspect.
// Call the returned function after parsing.
func bindIstioNamespace(f envflag.Set) func() (string, error) {
	var ns string
	f.String(&ns, "istio-namespace", "ISTIO_NAMESPACE", "istio-system", "the namespace of Istio's control plane: where a revision's istio-sidecar-injector ConfigMap is read when its webhook names no Service")
	return func() (string, error) {
		if !kube.ValidNamespace(ns) {
			return "", fmt.Errorf("--istio-namespace %q: want a namespace name: 1 to 63 lower-case letters, digits and '-'", ns)
		}
		return ns, nil
	}
}

// bindIptablesBackend declares --iptables-backend for the agent and
// inspect: the backend the pods' rules are read and repaired with. Call
// the returned function after parsing.
func bindIptablesBackend(f envflag.Set) func() (release.Backend, error) {
	var name string
	f.String(&name, "iptables-backend", "IPTABLES_BACKEND", string(release.Auto), "the iptables backend the pods' rules are read and repaired with: "+release.Backends+" (auto: inspect on the node uses the node's iptables; the agent, whose image has both, the one holding the host's rules)")
	return func() (release.Backend, error) {
		b, err := release.ParseBackend(name)
		if err != nil {
			return "", fmt.Errorf("--iptables-backend: %w", err)
		}
		return b, nil
	}
}

// reservedTaintKey: the key's prefix is Kubernetes' own, whose taints
// other controllers own (node.kubernetes.io/not-ready, ...).
func reservedTaintKey(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == d || strings.HasSuffix(prefix, "."+d) {
			return true
		}
	}
	return false
}

// validate checks the agent's own flags; the error names the flag and what
// is allowed.
func (c Config) validate() error {
	var errs []error
	if c.NodeName != "" && !install.ValidObjectName(c.NodeName) {
		errs = append(errs, fmt.Errorf("--node-name %q: want a node name (lower-case letters, digits, '-' and '.')", c.NodeName))
	}
	if errs2 := validation.IsQualifiedName(c.AuditLabelKey); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--audit-label-key %q: want a label key: %s", c.AuditLabelKey, strings.Join(errs2, "; ")))
	}
	if errs2 := validation.IsDNS1123Label(c.ValidationContainer); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--validation-container %q: want a container name: %s", c.ValidationContainer, strings.Join(errs2, "; ")))
	}
	if errs2 := validation.IsQualifiedName(c.TaintKey); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--taint-key %q: want a taint key (a label key such as cni.istio.io/not-ready): %s", c.TaintKey, strings.Join(errs2, "; ")))
	} else if reservedTaintKey(c.TaintKey) {
		errs = append(errs, fmt.Errorf("--taint-key %q: a key under kubernetes.io or k8s.io belongs to Kubernetes (the node lifecycle controller, the cloud provider); want a key of istio-cni's, such as cni.istio.io/not-ready", c.TaintKey))
	}
	if errs2 := validation.IsValidLabelValue(c.AuditLabelValue); len(errs2) > 0 {
		errs = append(errs, fmt.Errorf("--audit-label-value %q: want a label value: %s", c.AuditLabelValue, strings.Join(errs2, "; ")))
	}
	if !install.ValidObjectName(c.DaemonSetName) {
		errs = append(errs, fmt.Errorf("--daemonset-name %q: want a DNS subdomain name (lower-case letters, digits, '-' and '.')", c.DaemonSetName))
	}
	if !install.ValidObjectName(c.ServiceAccount) {
		errs = append(errs, fmt.Errorf("--service-account %q: want a ServiceAccount name (lower-case letters, digits, '-' and '.')", c.ServiceAccount))
	}
	for _, a := range []struct{ flag, value string }{{"--health-addr", c.HealthAddr}, {"--metrics-addr", c.MetricsAddr}} {
		if _, _, err := net.SplitHostPort(a.value); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port or :port", a.flag, a.value))
		}
	}
	return errors.Join(errs...)
}
