// Package install keeps istio-cni installed on a node: the plugin binary,
// its kubeconfig and the chained conflist, repaired as soon as something
// undoes them, and removed when the product is uninstalled.
package install

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/kube/apilookup"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
	"istio-cni.local/istio-cni/pkg/shim"
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

// Config is the installer's configuration.
type Config struct {
	Paths
	OwnFiles
	PluginSettings
	HostKubeconfigPath string
	ServiceAccountDir  string
	APIHost, APIPort   string
	// PrimaryConfigName names the primary's config to chain after
	// (upstream's cniConfFileName); empty: the first valid one, as the
	// runtime picks (chain.FindPrimary).
	PrimaryConfigName string
	LogLevel          slog.Level
	Mode              Mode
	// Chained: istio-cni is chained after the primary CNI (OwnedConfigName
	// is the owned conflist). Otherwise it is a network of its own, a
	// standalone config named OwnedConfigName that Multus calls as a
	// delegate (pkg/chain Standalone).
	Chained bool
	// PodNamespace is the agent's own namespace, where it mints the
	// plugin's tokens.
	PodNamespace string
	// PluginServiceAccount, in PodNamespace, is the plugin's own identity:
	// the installer mints its tokens (PluginTokenTTL long) for the plugin's
	// kubeconfig. Empty: the kubeconfig carries the installer's own token.
	PluginServiceAccount string
	PluginTokenTTL       time.Duration
	// FightRepairs repairs within FightWindow mean another writer keeps
	// undoing us: the fight is reported and repairs are paced (never
	// stopped), until FightWindow passes without one.
	FightRepairs int
	FightWindow  time.Duration
	// RuntimeDrain is how long the runtime may still run a config taken
	// out of the directory: it reloads on the change, but a sandbox whose
	// setup began before runs the chain it loaded to its end (containerd
	// holds it for the whole chain). At uninstall the binaries and
	// kubeconfig go only this long after the configs.
	RuntimeDrain time.Duration
	// ConfGroupRead writes our configs 0640 rather than 0600 (upstream's
	// CNI_CONF_GROUP_READ), for a node agent of another project that reads
	// them as a group.
	ConfGroupRead bool
}

// ConfMode is the mode of the configs we write: upstream's, whatever the
// primary's own file has (CIS benchmarks ask for 0600).
func (c Config) ConfMode() os.FileMode {
	if c.ConfGroupRead {
		return 0o640
	}
	return 0o600
}

// The config's default names: the owned conflist sorts before most
// primaries' (10-*); the standalone config is named as upstream's OpenShift
// profile names it.
const (
	DefaultOwnedName      = "02-istio-cni.conflist"
	DefaultStandaloneName = "istio-cni.conf"
)

// DefaultExcludeNamespaces are the namespaces never redirected unless
// configured otherwise (upstream's default too).
const DefaultExcludeNamespaces = "kube-system"

// KubeconfigName is the plugin kubeconfig's file name in RunDir: not
// upstream Istio's istio-cni-kubeconfig, which its installer rewrites on
// every pass and deletes at shutdown, in the same directory.
const KubeconfigName = "istio-cni-sidecar-kubeconfig"

// LegacyKubeconfigName is where earlier releases of this project wrote
// theirs (upstream's name): removed at uninstall, when ours.
const LegacyKubeconfigName = "istio-cni-kubeconfig"

// PluginLogName is the plugin's log file (its log_file) in LogDirName,
// kept to 1 MiB and one rotated copy (PluginLogName.1): the node's record
// of ADDs and DELs while no agent takes the plugin's reports.
const PluginLogName = "istio-cni.log"

// LogDirName is the directory, in RunDir, of the plugin's log. The
// installer makes it and the uninstall removes it; the plugin only ever
// creates the file, so an invocation that outlives the uninstall (a DEL
// already exec'd) cannot leave a log behind.
const LogDirName = "log"

// ReportsSocket is the agent's socket for the plugin's reports, in
// RunDir (the host directory of the kubeconfig).
const ReportsSocket = "reports.sock"

// PodsSocket is the agent's socket for the plugin's pod lookups, in
// RunDir.
const PodsSocket = "pods.sock"

// RecordsDirName is the directory, in RunDir, where the plugin
// records what it applied to each sandbox (pkg/applied).
const RecordsDirName = "sandboxes"

// CacheDirName is the directory, in RunDir, where the plugin keeps what it
// learned of the node (pluginconf.Entry.CacheDir).
const CacheDirName = "cache"

// HostRunDir is RunDir as the plugin sees it on the node: the entry's
// paths are in it.
func (c Config) HostRunDir() string { return filepath.Dir(c.HostKubeconfigPath) }

// FromHostRunDir is where the installer sees a path in HostRunDir;
// false for a path outside it.
func (c Config) FromHostRunDir(path string) (string, bool) {
	rel, err := filepath.Rel(c.HostRunDir(), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return filepath.Join(c.RunDir, rel), true
}

// PluginBinary is the plugin's file name in PluginSource and CNIBinDir:
// the shim the runtime runs (pkg/shim), named as its entry's type
// (chain.PluginType), which upstream Istio's installer never touches.
const PluginBinary = chain.PluginType

// LegacyPluginBinary is the shim's name in earlier releases of this
// project, and upstream Istio's plugin's. An earlier release's stays until
// the uninstall: a runtime that tears a sandbox down with the chain it set
// it up with (CRI-O's and Multus' cached configs) runs it at the pod's
// DEL, however long after the upgrade.
const LegacyPluginBinary = chain.LegacyType

// FullBinary is the full plugin, installed beside the shim, which execs
// it for every verb the node agent does not run.
const FullBinary = shim.FullBinary

// LookupBinary is the plugin's API lookup helper (pkg/kube/apilookup),
// installed beside it.
const LookupBinary = apilookup.Binary

// PluginBinaries are what the installer copies into CNIBinDir, in order:
// each before the one that runs it, so that the shim never runs without
// the full plugin, nor the full plugin without its helper.
var PluginBinaries = []string{LookupBinary, FullBinary, PluginBinary}

// BindFlags declares the installer's flags on fs, each defaulting to the
// environment variable named in its usage. selfDir holds the installer's own
// binary, the default plugin source. Call the returned function after
// fs.Parse for the validated Config.
func BindFlags(fs *flag.FlagSet, getenv func(string) string, selfDir string) func() (Config, error) {
	var c Config
	var raw rawFlags
	f := envflag.Set{FS: fs, Getenv: getenv}
	paths := BindPaths(f, HostRoot)
	own := BindOwnFiles(f, selfDir)
	plugin := BindPluginSettings(f)
	podNamespace := BindPodNamespace(f, true)
	f.String(&c.HostKubeconfigPath, "host-kubeconfig-path", "HOST_KUBECONFIG_PATH", NodeRunDir+"/"+KubeconfigName, "the kubeconfig's path as the plugin sees it on the host; one ending in "+LegacyKubeconfigName+" (earlier releases' name, which manifests keep setting so that a rollback starts) means "+KubeconfigName+" in its directory")
	f.String(&c.ServiceAccountDir, "service-account-dir", "SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount", "the installer's service-account token and CA")
	f.String(&c.PrimaryConfigName, "primary-config-name", "PRIMARY_CONFIG_NAME", "", "the primary CNI's config file to chain after (upstream's cniConfFileName); empty: the first valid one, as the runtime picks")
	f.String(&raw.chained, "chained", "CHAINED_CNI_PLUGIN", "true", "true: chain istio-cni after the primary CNI; false: write a standalone config for Multus (--cni-net-dir is then Multus' config directory)")
	f.String(&raw.level, "log-level", "LOG_LEVEL", "info", "debug, info, warn or error (also passed to the plugin)")
	f.String(&raw.mode, "mode", "MODE", string(Owned), "owned or inplace")
	f.String(&c.PluginServiceAccount, "plugin-service-account", "PLUGIN_SERVICE_ACCOUNT", "", "ServiceAccount (in the agent's namespace) whose tokens the plugin's kubeconfig carries; empty: the installer's own")
	f.String(&raw.ttl, "plugin-token-ttl", "PLUGIN_TOKEN_TTL", "1h", "lifetime of the plugin's minted tokens (10m to 24h); renewed at 80%")
	f.String(&raw.repairs, "conflict-repairs", "CONFLICT_REPAIRS", "10", "repairs within --conflict-window that mean another writer is fighting us: reported, and repairs paced to at most one a second")
	f.String(&raw.window, "conflict-window", "CONFLICT_WINDOW", "30s", "see --conflict-repairs; a fight ends after this long without a repair")
	f.String(&raw.groupRead, "cni-conf-group-read", "CNI_CONF_GROUP_READ", "false", "true: write our CNI configs 0640 rather than 0600, so that a group may read them (upstream's setting of the same name)")
	f.String(&raw.drain, "runtime-drain", "RUNTIME_DRAIN", "5s", "how long after the uninstall takes our configs out of the directory the runtime may still run them (a sandbox set up meanwhile): the binaries and kubeconfig go only then (0s to 10s)")
	return func() (Config, error) {
		c.Paths = *paths
		errs := raw.parse(&c)
		var err error
		if c.PluginSettings, err = plugin(); err != nil {
			errs = append(errs, err)
		}
		if c.PodNamespace, err = podNamespace(); err != nil {
			errs = append(errs, err)
		}
		c.OwnFiles = own(c.Chained)
		c.APIHost, c.APIPort = getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
		// Event paths are compared with these: they must be clean.
		for _, p := range []*string{&c.CNIBinDir, &c.PluginSource, &c.CNINetDir, &c.RunDir, &c.NetnsDir, &c.ServiceAccountDir, &c.HostKubeconfigPath} {
			if *p != "" {
				*p = filepath.Clean(*p)
			}
		}
		if len(errs) > 0 {
			return Config{}, errors.Join(errs...)
		}
		if err := c.validate(); err != nil {
			return c, err
		}
		if filepath.Base(c.HostKubeconfigPath) == LegacyKubeconfigName {
			c.HostKubeconfigPath = filepath.Join(c.HostRunDir(), KubeconfigName)
		}
		return c, nil
	}
}

// maxRuntimeDrain keeps the uninstall, after shutdownBudget's check,
// within the DaemonSet's 30-second grace period.
const maxRuntimeDrain = 10 * time.Second

// rawFlags are the installer's own flags that are parsed, as given.
type rawFlags struct{ level, mode, chained, repairs, window, ttl, drain, groupRead string }

// parse sets c's fields from r; the errors name the flag.
func (r rawFlags) parse(c *Config) []error {
	var errs []error
	var err error
	if c.FightRepairs, err = strconv.Atoi(r.repairs); err != nil || c.FightRepairs < 2 {
		errs = append(errs, fmt.Errorf("--conflict-repairs %q: want a whole number of at least 2", r.repairs))
	}
	if c.FightWindow, err = time.ParseDuration(r.window); err != nil || c.FightWindow <= 0 {
		errs = append(errs, fmt.Errorf("--conflict-window %q: want a duration such as 30s", r.window))
	}
	if c.RuntimeDrain, err = time.ParseDuration(r.drain); err != nil || c.RuntimeDrain < 0 || c.RuntimeDrain > maxRuntimeDrain {
		errs = append(errs, fmt.Errorf("--runtime-drain %q: want a duration from 0s to 10s", r.drain))
	}
	if c.PluginTokenTTL, err = time.ParseDuration(r.ttl); err != nil || c.PluginTokenTTL < MinPluginTokenTTL || c.PluginTokenTTL > MaxPluginTokenTTL {
		errs = append(errs, fmt.Errorf("--plugin-token-ttl %q: want a duration from 10m to 24h", r.ttl))
	}
	if c.LogLevel, err = ParseLevel(r.level); err != nil {
		errs = append(errs, err)
	}
	if c.Chained, err = strconv.ParseBool(r.chained); err != nil {
		errs = append(errs, fmt.Errorf("--chained %q: want true or false", r.chained))
	}
	if c.ConfGroupRead, err = strconv.ParseBool(r.groupRead); err != nil {
		errs = append(errs, fmt.Errorf("--cni-conf-group-read %q: want true or false", r.groupRead))
	}
	c.Mode = Mode(r.mode)
	return errs
}

// ParseLevel reads --log-level.
func ParseLevel(s string) (slog.Level, error) {
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
		{"--run-dir", c.RunDir}, {"--service-account-dir", c.ServiceAccountDir},
		{"--plugin-source", c.PluginSource}, {"--host-kubeconfig-path", c.HostKubeconfigPath}, {"--netns-dir", c.NetnsDir}}
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
	if base := filepath.Base(c.HostKubeconfigPath); base != KubeconfigName && base != LegacyKubeconfigName {
		errs = append(errs, fmt.Errorf("--host-kubeconfig-path %q: the file is written as %s, so the path must end in it (or in %s, earlier releases' name, which names the same directory)", c.HostKubeconfigPath, KubeconfigName, LegacyKubeconfigName))
	}
	name, ext := c.OwnedConfigName, ".conflist"
	if !c.Chained {
		ext = ".conf" // one plugin config: runtimes read a .conflist as a list
	}
	if name != filepath.Base(name) || !strings.HasSuffix(name, ext) || strings.HasPrefix(name, ".") {
		errs = append(errs, fmt.Errorf("--owned-config-name %q: want a file name ending in %s (--chained=%v)", name, ext, c.Chained))
	}
	if p := c.PrimaryConfigName; p != "" && (p != filepath.Base(p) || strings.HasPrefix(p, ".") || p == c.OwnedConfigName ||
		!slices.ContainsFunc([]string{".conflist", ".conf", ".json"}, func(ext string) bool { return strings.HasSuffix(p, ext) })) {
		errs = append(errs, fmt.Errorf("--primary-config-name %q: want the file name of the primary's config (.conflist, .conf or .json), not --owned-config-name's", p))
	}
	if c.Mode == Inplace && c.PrimaryConfigName != "" {
		errs = append(errs, fmt.Errorf("--primary-config-name %q with --mode=inplace: our entry would go into a file the runtime may not read first; want --mode=owned (our copy of it sorts first) or no name", c.PrimaryConfigName))
	}
	if !c.Chained && c.PrimaryConfigName != "" {
		errs = append(errs, fmt.Errorf("--primary-config-name %q: a standalone config (--chained=false) chains after no primary: want it empty", c.PrimaryConfigName))
	}
	if !c.Chained && c.Mode != Owned {
		errs = append(errs, fmt.Errorf("--mode %q: a standalone config (--chained=false) is always owned: want owned", c.Mode))
	}
	if c.PluginServiceAccount != "" && !ValidObjectName(c.PluginServiceAccount) {
		errs = append(errs, fmt.Errorf("--plugin-service-account %q: want a ServiceAccount name (lower-case letters, digits, '-' and '.'), or empty", c.PluginServiceAccount))
	}
	if c.Mode != Owned && c.Mode != Inplace {
		errs = append(errs, fmt.Errorf("--mode %q: want owned or inplace", c.Mode))
	}
	return errors.Join(errs...)
}

type flagValue struct{ flag, value string }

// ValidObjectName: a DNS-1123 subdomain, as Kubernetes names most objects.
func ValidObjectName(s string) bool {
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
