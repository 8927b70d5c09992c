package nodeagent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
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
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
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
       install-cni inspect --node [flags]

Prints the build of install-cni that inspects (in the agent's pod, the
agent's), the plugin's decision for the pod and why, whether Istio's injector
should have given it a sidecar (and did), whether the node's CNI
config chains istio-cni, the rules the pod should have, the rules it has
(read from its network namespace) and the difference. Run it on the pod's
node, or in the agent's pod there:

  kubectl istio-cni why default/web-0

(the kubectl plugin finds the pod's node and runs this in the agent's pod
there). With --node, it summarises the node instead, as its agent sees it:
the agent's readiness (/readyz), whether the runtime's config chains
istio-cni, and the audit's counts of meshed pods found unredirected or
unchecked and of pods that missed their injection (/metrics); kubectl
istio-cni check runs it on every node. -o json prints the same facts as
one JSON document (its field names are stable).

Exit status: 0 consistent (--node: the node is ok), 3 not as the plugin
would leave it or missed its sidecar injection (--node: the node is not
ok), 1 error.
`

// inspectFlags are inspect's flags, parsed and checked.
type inspectFlags struct {
	paths      *install.Paths
	kubeconfig string
	backend    release.Backend
	istioNS    string
	opts       inspect.Options
	// output is "text" or "json"; node: the node summary, not a pod.
	output string
	node   bool
	// health and metrics are the agent's endpoint addresses.
	health, metrics *string
}

// Output formats of inspect's -o.
const (
	outputText = "text"
	outputJSON = "json"
)

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
	fs.StringVar(&c.output, "o", outputText, "output format: "+outputText+" or "+outputJSON)
	fs.StringVar(&c.output, "output", outputText, "output format: "+outputText+" or "+outputJSON)
	fs.BoolVar(&c.node, "node", false, "summarise the node (its agent's readiness, CNI config and audit counts), not a pod")
	c.health, c.metrics = bindEndpointAddrs(f)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := c.paths.Clean(); err != nil {
		return c, err
	}
	if c.output != outputText && c.output != outputJSON {
		return c, fmt.Errorf("inspect: -o %q: want %s or %s", c.output, outputText, outputJSON)
	}
	if c.node {
		if fs.NArg() != 0 {
			return c, fmt.Errorf("inspect --node: want no argument, got %q", fs.Args())
		}
		return c, nil
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
	c.opts.Writer.Native = settings.NativeNftables
	c.opts.Build = version.Line("install-cni")
	return c, nil
}

// runInspect is the inspect subcommand.
func runInspect(args []string, getenv func(string) string, stdout io.Writer) (int, error) {
	c, err := parseInspectFlags(args, getenv)
	if err != nil {
		return 1, err
	}
	if c.node {
		return runInspectNode(c, stdout)
	}
	paths, backend := c.paths, c.backend
	cs, err := inspectClient(c.kubeconfig, paths.RunDir)
	if err != nil {
		return 1, err
	}
	if backend == release.Auto {
		// On the node: where its iptables leads; in the agent's image
		// (both backends, no plain iptables): the one holding the
		// host's rules. Only for sandboxes whose record names none:
		// on a node whose primary's image writes the other backend,
		// this guess is wrong (the audit reads the record too).
		if backend, err = release.Auto.Resolve(false); err != nil {
			backend = xtables.Detect(context.Background(), xtables.ExecRunner{})
		}
	}
	c.opts.Writer.Backend = backend
	// As the audit's: the iptables inspect runs in the pod's namespace get
	// only what iptables needs, not the CAP_SYS_ADMIN inspect keeps for
	// setns.
	if err := childcaps.Limit(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW); err != nil {
		return 1, fmt.Errorf("inspect: limiting the capabilities of the iptables it runs: %w", err)
	}
	// The pod's rules are read as ADD wrote them (inspect.Report's
	// Backend), the audit's way.
	network := func(w applied.Writer) *podnet.Network {
		return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	report, err := inspect.Run(ctx, c.opts, inspect.Deps{
		GetPod:     func(ctx context.Context, ns, name string) (*inspect.Pod, error) { return getPod(ctx, cs, ns, name) },
		Namespaces: netnsdir.Finder{Dir: paths.NetnsDir},
		Observe: func(ctx context.Context, path string, b release.Backend, f iptables.Family) (obs *iptables.Observed, err error) {
			prog := network(applied.Writer{Backend: b}).Programmer
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
		Check: func(ctx context.Context, path string, m iptables.Model, w applied.Writer) ([]string, error) {
			return network(w).Check(ctx, path, m)
		},
		Holding: func(ctx context.Context, path string, m iptables.Model) (applied.Writer, error) {
			return network(c.opts.Writer).Holding(ctx, path, m)
		},
		HasIPv6: network(c.opts.Writer).HasIPv6,
		Records: applied.Store{Dir: filepath.Join(paths.RunDir, install.RecordsDirName)},
	})
	if err != nil {
		return 1, err
	}
	write := report.Print
	if c.output == outputJSON {
		write = report.PrintJSON
	}
	if err := write(stdout); err != nil {
		return 1, err
	}
	if !report.Consistent() {
		return exitInconsistent, nil
	}
	return 0, nil
}

// runInspectNode is inspect --node: the node summary. It reads no API
// object: the node's agent and its config directory say it all.
func runInspectNode(c inspectFlags, stdout io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	doc := inspect.Node(ctx, inspect.NodeOptions{CNINetDir: c.paths.CNINetDir, HealthAddr: *c.health, MetricsAddr: *c.metrics,
		Build: version.Line("install-cni")}, inspect.NodeDeps{Get: httpGet})
	write := doc.Print
	if c.output == outputJSON {
		write = doc.PrintJSON
	}
	if err := write(stdout); err != nil {
		return 1, err
	}
	if !doc.OK() {
		return exitInconsistent, nil
	}
	return 0, nil
}

// httpGet fetches a URL of the agent's on this host: its status and
// body (up to 1 MiB).
func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), err
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
