package nodeagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nftables"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/childcaps"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
	"istio-cni.local/istio-cni/pkg/nodeagent/inspect"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/envflag"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/version"
)

// Exit codes of inspect beyond 0 (consistent) and 1 (could not inspect).
const exitInconsistent = 3

const inspectUsage = `usage: install-cni inspect [flags] NAMESPACE/NAME

Prints the build of install-cni that inspects (in the agent's pod, the
agent's), the plugin's decision for the pod and why, whether Istio's injector
should have given it a sidecar (and did), whether the node's CNI
config chains istio-cni, the rules the pod should have, the rules it has
(read from its network namespace) and the difference. Run it on the pod's
node, or in the agent's pod there:

  kubectl -n istio-cni exec ds/istio-cni-node -- /install-cni inspect default/web-0

Exit status: 0 consistent, 3 not as the plugin would leave it or missed
its sidecar injection, 1 error.
`

// inspectFlags are inspect's flags, parsed and checked.
type inspectFlags struct {
	paths      *install.Paths
	kubeconfig string
	backend    release.Backend
	istioNS    string
	opts       inspect.Options
}

// parseInspectFlags reads inspect's flags and its NAMESPACE/NAME argument.
// Its paths and the plugin's settings are the agent's
// (install.BindPaths, install.BindPluginSettings): in the agent's pod the
// DaemonSet's environment sets them, and on the node itself the defaults
// are the node's own.
func parseInspectFlags(args []string, getenv func(string) string) (inspectFlags, error) {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.Usage = func() { _, _ = fmt.Fprint(fs.Output(), inspectUsage); fs.PrintDefaults() }
	f := envflag.Set{FS: fs, Getenv: getenv}
	c := inspectFlags{paths: install.BindPaths(f, "")}
	plugin := install.BindPluginSettings(f)
	agentNS := install.BindPodNamespace(f, false)
	istioNS := bindIstioNamespace(f)
	backendOf := bindIptablesBackend(f)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig to read the pod with; default: in-cluster credentials, else the plugin's "+
		install.KubeconfigName+" in --run-dir")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := c.paths.Clean(); err != nil {
		return c, err
	}
	ns, name, ok := strings.Cut(fs.Arg(0), "/")
	if fs.NArg() != 1 || !ok || !kube.ValidNamespace(ns) || name == "" {
		fs.Usage()
		return c, fmt.Errorf("inspect: want one NAMESPACE/NAME argument, got %q", fs.Args())
	}
	backend, backendErr := backendOf()
	settings, settingsErr := plugin()
	agentNamespace, agentErr := agentNS()
	istioNamespace, istioErr := istioNS()
	if err := errors.Join(backendErr, settingsErr, agentErr, istioErr); err != nil {
		return c, err
	}
	c.backend, c.istioNS = backend, istioNamespace
	c.opts = inspect.Options{Namespace: ns, Name: name, AgentNamespace: agentNamespace, CNINetDir: c.paths.CNINetDir,
		Settings: decision.DefaultNodeSettings(), ExcludeNamespaces: settings.ExcludeNamespaces}
	c.opts.Settings.IPv6 = settings.IPv6Redirect
	c.opts.Native = settings.NativeNftables
	c.opts.Build = version.Line("install-cni")
	return c, nil
}

// runInspect is the inspect subcommand.
func runInspect(args []string, getenv func(string) string, stdout io.Writer) (int, error) {
	c, err := parseInspectFlags(args, getenv)
	if err != nil {
		return 1, err
	}
	paths, backend := c.paths, c.backend
	cs, err := inspectClient(c.kubeconfig, paths.RunDir)
	if err != nil {
		return 1, err
	}
	if backend == release.Auto {
		// On the node: where its iptables leads; in the agent's image
		// (both backends, no plain iptables): the one holding the
		// host's rules.
		if backend, err = release.Auto.Resolve(false); err != nil {
			backend = xtables.Detect(context.Background(), xtables.ExecRunner{})
		}
	}
	// As the audit's: the iptables inspect runs in the pod's namespace get
	// only what iptables needs, not the CAP_SYS_ADMIN inspect keeps for
	// setns.
	if err := childcaps.Limit(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW); err != nil {
		return 1, fmt.Errorf("inspect: limiting the capabilities of the iptables it runs: %w", err)
	}
	prog := &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: backend}
	network := &podnet.Network{Programmer: prog}
	native := &podnet.Network{Native: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := inspect.Run(ctx, c.opts, inspect.Deps{
		GetPod:     func(ctx context.Context, ns, name string) (*inspect.Pod, error) { return getPod(ctx, cs, ns, name) },
		Namespaces: netnsdir.Finder{Dir: paths.NetnsDir},
		Observe: func(ctx context.Context, path string, f iptables.Family) (obs *iptables.Observed, err error) {
			err = podnet.Enter(path, func() error {
				obs, err = prog.Read(ctx, f)
				return err
			})
			return obs, err
		},
		Injectors: func(ctx context.Context) injection.View { return readInjectors(ctx, cs, c.istioNS) },
		NamespaceLabels: func(ctx context.Context, name string) (map[string]string, error) {
			n, err := cs.Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading namespace %s: %w", name, err)
			}
			return n.Labels, nil
		},
		ObserveNative: func(_ context.Context, path string, m iptables.Model) (have []string, err error) {
			err = podnet.Enter(path, func() error {
				rs := nftables.Of(m)
				have, err = nfnl.ListNative(&rs)
				return err
			})
			return have, err
		},
		Check: func(ctx context.Context, path string, m iptables.Model, isNative bool) ([]string, error) {
			if isNative {
				return native.Check(ctx, path, m)
			}
			return network.Check(ctx, path, m)
		},
		HasIPv6: network.HasIPv6,
		Records: applied.Store{Dir: filepath.Join(paths.RunDir, install.RecordsDirName)},
	})
	if err != nil {
		return 1, err
	}
	if err := report.Print(stdout); err != nil {
		return 1, err
	}
	if !report.Consistent() {
		return exitInconsistent, nil
	}
	return 0, nil
}

// inspectClient: --kubeconfig, else the pod's own credentials, else (on
// the node as root) the plugin's kubeconfig in the run directory.
func inspectClient(kubeconfig, runDir string) (kubeclient.Interface, error) {
	var rc *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	default:
		if rc, err = rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
			rc, err = clientcmd.BuildConfigFromFlags("", filepath.Join(runDir, install.KubeconfigName))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: API credentials: %w", err)
	}
	return kubeclient.New(rc)
}

func getPod(ctx context.Context, cs kubeclient.Interface, ns, name string) (*inspect.Pod, error) {
	p, err := cs.Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
	}
	return toInspect(p)
}

func toInspect(p *corev1.Pod) (*inspect.Pod, error) {
	kp, err := apipod.ToKube(p)
	if err != nil {
		return nil, err
	}
	return &inspect.Pod{Pod: kp, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), IPs: apipod.IPs(p)}, nil
}

// Inspect is the inspect subcommand; it returns the exit status.
func Inspect(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	code, err := runInspect(args, getenv, stdout)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "install-cni:", err)
	}
	return code
}
