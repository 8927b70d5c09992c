// Package kubectlplugin is istio-cni's kubectl plugin (kubectl
// istio-cni): it finds the node agent on the node that matters and asks
// it. why NS/POD runs the agent's inspect on the pod's node; check asks
// every node's agent for its summary (install-cni inspect --node) and
// judges each node; logs NODE reads that node's agent's log. Everything
// it reads or runs in the cluster goes through Cluster.
//
// It lives beside its main, not in pkg/: pkg/ holds what runs per pod
// and per node (docs/architecture.md); this runs on the user's machine,
// and it links nothing of pkg/nodeagent (Linux-only, and the agent's).
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/pkg/version"
)

// defaultTaintKey is the startup taint's key unless the agent is
// configured with another (TAINT_KEY; pkg/nodeagent/taint DefaultKey).
const defaultTaintKey = "cni.istio.io/not-ready"

const usage = `kubectl istio-cni: ask istio-cni's node agent on the node that matters.

  kubectl istio-cni why NAMESPACE/POD [-o json]
      the pod's node's agent says whether the pod is redirected and why
      (install-cni inspect there). Exit 0 consistent, 3 not (or it missed
      its sidecar injection), 1 error.
  kubectl istio-cni check [-o json]
      every node: its agent present and ready, its CNI config chaining
      istio-cni, the startup taint, the meshed pods its audit found
      unredirected or unchecked, the pods that missed injection. Exit 3
      when a node is wrong (a node the DaemonSet keeps off is "excluded").
  kubectl istio-cni logs NODE [-f] [--previous] [--tail N]
      the log of the agent on NODE.
  kubectl istio-cni version

Flags of every command:
`

// globals are the flags every command takes.
type globals struct {
	kubeconfig, context, namespace, taintKey string
}

func bindGlobals(fs *pflag.FlagSet) *globals {
	g := &globals{}
	fs.StringVar(&g.kubeconfig, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&g.context, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&g.namespace, "istio-cni-namespace", "n", "istio-cni", "the namespace istio-cni's DaemonSet runs in")
	fs.StringVar(&g.taintKey, "taint-key", "", "the startup taint's key (default: the agent's TAINT_KEY, as its DaemonSet's settings say, else "+defaultTaintKey+")")
	return g
}

// Main runs the plugin with args (os.Args[1:]) and returns its exit
// status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code, err := run(ctx, args, stdout, stderr)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "kubectl istio-cni:", err)
	}
	return code
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	sub := ""
	if len(args) > 0 {
		sub, args = args[0], args[1:]
	}
	fs := pflag.NewFlagSet("kubectl istio-cni "+sub, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	g := bindGlobals(fs)
	output := outputText
	var lo LogOptions
	switch sub {
	case "why", "check":
		fs.StringVarP(&output, "output", "o", outputText, "output format: text or json")
	case "logs":
		fs.BoolVarP(&lo.Follow, "follow", "f", false, "stream the log")
		fs.BoolVarP(&lo.Previous, "previous", "p", false, "the previous container's log (after a restart)")
		fs.Int64Var(&lo.Tail, "tail", -1, "lines from the end; -1: all")
	case "version", "--version":
		if len(args) > 0 {
			return 2, fmt.Errorf("version: unexpected arguments %q", args)
		}
		_, err := fmt.Fprintln(stdout, version.Line("kubectl-istio_cni"))
		return exitOK, err
	case "", "help", "-h", "--help":
		_, _ = fmt.Fprint(stderr, usage+fs.FlagUsages())
		if sub == "" {
			return 2, errors.New("want a command: why, check, logs or version")
		}
		return exitOK, nil
	default:
		_, _ = fmt.Fprint(stderr, usage+fs.FlagUsages())
		return 2, fmt.Errorf("unknown command %q: want why, check, logs or version", sub)
	}
	fs.Usage = func() { _, _ = fmt.Fprint(stderr, usage+fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if output != outputText && output != outputJSON {
		return 2, fmt.Errorf("-o %q: want text or json", output)
	}
	want := map[string]string{"why": "NAMESPACE/POD", "logs": "NODE"}[sub]
	if (want == "") != (fs.NArg() == 0) || fs.NArg() > 1 {
		return 2, fmt.Errorf("%s: want %s, got %q", sub, or(want, "no argument"), fs.Args())
	}
	c, err := connect(*g)
	if err != nil {
		return exitError, err
	}
	switch sub {
	case "why":
		ns, name, ok := strings.Cut(fs.Arg(0), "/")
		if !ok || ns == "" || name == "" {
			return 2, fmt.Errorf("why: want NAMESPACE/POD, got %q", fs.Arg(0))
		}
		return why(ctx, c, ns, name, output, stdout, stderr)
	case "check":
		return check(ctx, c, g.taintKey, output, stdout)
	}
	if err := logs(ctx, c, fs.Arg(0), lo, stdout); err != nil {
		return exitError, err
	}
	return exitOK, nil
}

// connect is the cluster as kubectl reaches it: the same kubeconfig
// loading rules (--kubeconfig, else $KUBECONFIG, else ~/.kube/config) and
// --context; exec in the agent's pods by kubectl itself.
func connect(g globals) (Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return Cluster{}, fmt.Errorf("the kubeconfig: %w", err)
	}
	rc.UserAgent = "kubectl-istio_cni/" + version.Get()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Cluster{}, err
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return Cluster{}, fmt.Errorf("kubectl, which runs the agent's commands in its pod: %w", err)
	}
	return Cluster{Client: cs, Namespace: g.namespace, Exec: kubectlExec{path: kubectl, kubeconfig: g.kubeconfig, context: g.context}}, nil
}

// kubectlExec runs a command in a pod through `kubectl exec`, with the
// plugin's --kubeconfig and --context: the exec streams as kubectl's own
// (client-go's remotecommand needs modules this one does not require).
type kubectlExec struct {
	path, kubeconfig, context string
}

func (k kubectlExec) Exec(ctx context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) (int, error) {
	var args []string
	if k.kubeconfig != "" {
		args = append(args, "--kubeconfig", k.kubeconfig)
	}
	if k.context != "" {
		args = append(args, "--context", k.context)
	}
	args = append(args, "-n", namespace, "exec", pod, "-c", container, "--")
	cmd := exec.CommandContext(ctx, k.path, append(args, command...)...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, nil
	cmd.Env = os.Environ()
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return exitError, fmt.Errorf("kubectl exec: %w", err)
	}
	return exitOK, nil
}
