package install

import (
	"errors"
	"fmt"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
)

// The node's directories istio-cni uses, as the node sees them: the one
// place they are spelled. The DaemonSet mounts each at the same path under
// HostRoot (deployments/base/40-daemonset.yaml).
const (
	NodeCNIBinDir = "/opt/cni/bin"
	NodeCNINetDir = "/etc/cni/net.d"
	// NodeRunDir is istio-cni's run directory: the plugin's kubeconfig,
	// the agent's sockets, ADD's records.
	NodeRunDir   = "/var/run/istio-cni"
	NodeNetnsDir = "/var/run/netns"
	HostRoot     = "/host"
)

// Paths are the node's directories as this process finds them.
type Paths struct {
	CNIBinDir, CNINetDir string
	// RunDir is the node's NodeRunDir.
	RunDir string
	// NetnsDir is where the runtime binds every sandbox's network
	// namespace (the audit and inspect open them there).
	NetnsDir string
}

// BindPaths declares the directories' flags for every subcommand, each
// defaulting to its environment variable (the DaemonSet sets them), else
// to the node's path under root: "" when run on the node itself, HostRoot
// in the agent's pod. --run-dir also takes the name it had before,
// --kubeconfig-dir (KUBECONFIG_DIR), for one release.
func BindPaths(f envflag.Set, root string) *Paths {
	var p Paths
	f.String(&p.CNIBinDir, "cni-bin-dir", "CNI_BIN_DIR", root+NodeCNIBinDir, "the node's CNI bin directory, where the plugin is installed")
	f.String(&p.CNINetDir, "cni-net-dir", "CNI_NET_DIR", root+NodeCNINetDir, "the node's CNI config directory")
	runDir := root + NodeRunDir
	if old := f.Getenv("KUBECONFIG_DIR"); old != "" {
		runDir = old
	}
	f.String(&p.RunDir, "run-dir", "RUN_DIR", runDir, "istio-cni's run directory on the node (the plugin's kubeconfig, the agent's sockets, ADD's records)")
	f.FS.Var(stringAlias{&p.RunDir}, "kubeconfig-dir", "deprecated: --run-dir")
	f.String(&p.NetnsDir, "netns-dir", "NETNS_DIR", root+NodeNetnsDir, "the node's netns directory, where the runtime binds every sandbox's network namespace")
	return &p
}

// clean makes every path clean (event paths are compared with them) and
// checks each is absolute; errors name the flag.
func (p *Paths) clean() []error {
	var errs []error
	for _, v := range []struct {
		flag string
		path *string
	}{{"--cni-bin-dir", &p.CNIBinDir}, {"--cni-net-dir", &p.CNINetDir}, {"--run-dir", &p.RunDir}, {"--netns-dir", &p.NetnsDir}} {
		if !filepath.IsAbs(*v.path) {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path", v.flag, *v.path))
			continue
		}
		*v.path = filepath.Clean(*v.path)
	}
	return errs
}

// Clean is clean for the subcommands that bind Paths alone.
func (p *Paths) Clean() error { return errors.Join(p.clean()...) }

// stringAlias is a second name for a string flag.
type stringAlias struct{ p *string }

func (a stringAlias) String() string {
	if a.p == nil {
		return ""
	}
	return *a.p
}

func (a stringAlias) Set(v string) error { *a.p = v; return nil }
