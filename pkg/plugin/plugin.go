// Package plugin implements the istio-cni CNI verbs. Every verb is a thin
// sequence: parse the config, decide from the pod, and hand the rule model
// to the pod network. The OS and the API come in through Deps.
package plugin

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/kube/apilookup"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
	"istio-cni.local/istio-cni/pkg/wire/lookups"
)

// PodGetter reads one pod from the API.
type PodGetter interface {
	GetPod(ctx context.Context, namespace, name, uid string) (*kube.Pod, error)
}

// PodNetwork is the OS step: a pod's network namespace.
type PodNetwork interface {
	// Program writes the model as w says, and says how each family
	// was written (podnet.Network.Program).
	Program(ctx context.Context, netns string, m iptables.Model, w xtables.Write) (map[iptables.Family]xtables.Written, error)
	Check(ctx context.Context, netns string, m iptables.Model) ([]string, error)
	Cleanup(ctx context.Context, netns string) error
	// RemoveCopy removes an earlier copy of m's rules where they are
	// whole elsewhere (podnet.Network.RemoveCopy).
	RemoveCopy(ctx context.Context, netns string, m iptables.Model) error
	HasIPv6(netns string) (bool, error)
}

// Deps are the plugin's seams.
type Deps struct {
	// NewPodGetter builds the API client; it is called only when a pod
	// must be read.
	NewPodGetter func(conf *Config) (PodGetter, error)
	// AskAgent asks the node agent at socket for a pod (pkg/wire/lookups); any
	// error sends the lookup to the API. Nil never asks.
	AskAgent func(socket, namespace, name string) (lookups.Answer, error)
	// NewPodNetwork builds the namespace programmer that reads and
	// writes rules as w says (applied.Writer).
	NewPodNetwork func(w applied.Writer) PodNetwork
	// Stdout receives the CNI result; Stderr the log lines.
	Stdout io.Writer
	Stderr io.Writer
	Now    func() time.Time
	// HandedBack is why the node agent handed this ADD back to the
	// plugin (the shim's handoff.EnvHandedBack): the agent may have
	// written rules, so ADD reads back. NotHandedOff is why the shim did
	// not ask the agent. Both go into the log line.
	HandedBack, NotHandedOff string
}

func (d Deps) stdout() io.Writer {
	if d.Stdout == nil {
		return os.Stdout
	}
	return d.Stdout
}

// AgentBudget bounds asking the node agent for a pod, connecting included:
// it answers from memory in well under a millisecond, so an agent slower
// than this is wedged or starved, and the API answers instead.
const AgentBudget = 50 * time.Millisecond

// Plugin runs the CNI verbs with its dependencies.
type Plugin struct {
	deps Deps
}

// New returns a plugin wired to the real API, namespaces and iptables.
func New() *Plugin {
	return NewWithDeps(Deps{
		NewPodGetter: func(c *Config) (PodGetter, error) {
			// The helper beside this binary reads the API, so that the
			// plugin links no HTTP, TLS or YAML code (pkg/kube/apilookup).
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("locating %s: %w", apilookup.Binary, err)
			}
			return apilookup.Helper{Path: filepath.Join(filepath.Dir(exe), apilookup.Binary), Kubeconfig: c.Kubeconfig, Timeouts: c.parsed.Timeouts}, nil
		},
		AskAgent: func(socket, namespace, name string) (lookups.Answer, error) {
			return lookups.Get(socket, namespace, name, AgentBudget)
		},
		NewPodNetwork: podNetwork,
		Stdout:        os.Stdout,
		Stderr:        os.Stderr,
		Now:           time.Now,
		HandedBack:    os.Getenv(handoff.EnvHandedBack),
		NotHandedOff:  os.Getenv(handoff.EnvNotHandedOff),
	})
}

// podNetwork is the namespace programmer for a writer; how an ADD writes
// is the xtables.Write it passes.
func podNetwork(w applied.Writer) PodNetwork {
	return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}})
}

// NewWithDeps returns a plugin with the given seams (for tests).
func NewWithDeps(d Deps) *Plugin { return &Plugin{deps: d} }

// Funcs are the verbs for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, Status: p.Status, GC: p.GC}
}
