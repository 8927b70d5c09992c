package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// NodeOptions configures StartNode.
type NodeOptions struct {
	// Dir holds everything: the node's "host" CNI directories, the
	// components' state, configs and logs. Required; must exist.
	Dir string
	// Bridge and Subnet are the primary CNI's bridge device and pod range;
	// distinct per node, so a test node and the demo's can coexist.
	Bridge string
	Subnet netip.Prefix
	// Detach: the node outlives this process (see Options.Detach).
	Detach bool
	// StartTimeout bounds start-up until the node is Ready; default 3m.
	StartTimeout time.Duration
	// PrimaryCNIVersion is the cniVersion of the primary's conflist:
	// "1.1.0" by default, as current clusters' primaries say, which makes
	// containerd 2 call every chained plugin's STATUS each time kubelet
	// asks for the runtime's status (an error: NetworkReady false, the
	// Node NotReady); "1.0.0" for a node whose runtime never calls it.
	PrimaryCNIVersion string
}

// DefaultPrimaryCNIVersion is NodeOptions.PrimaryCNIVersion's default.
const DefaultPrimaryCNIVersion = "1.1.0"

// Node is a real single-node cluster: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd and kubelet, with a
// bridge + host-local + portmap primary CNI. Its "host" paths live under
// Dir, so the product installs into the node's directories, not this
// machine's.
type Node struct {
	*APIServer
	Name string
	// The node's /opt/cni/bin, /etc/cni/net.d and /var/run/istio-cni.
	CNIBinDir, CNINetDir, IstioRunDir string
	// PrimaryConfig is the primary CNI's conflist.
	PrimaryConfig string
	// Kubeconfig is an admin kubeconfig for kubectl.
	Kubeconfig string
	// ContainerdSocket is containerd's (and the CRI's) gRPC socket.
	ContainerdSocket string
	// Ctr is the node's containerd CLI (its build, `make kube-binaries`).
	Ctr string
	// PodLogDir is kubelet's pod log directory (podLogsDir).
	PodLogDir string
	// NetnsDir is where the runtime binds the pods' network namespaces
	// (the node's /var/run/netns), a shared mount under the node's
	// directory.
	NetnsDir string
	// KubeletPort is kubelet's HTTPS API (/metrics, exec, logs, ...) on
	// NodeIP; anonymous requests are allowed.
	KubeletPort int
	// NodeIP is the node's InternalIP: its pods' gateway on its bridge on
	// a single node, its eth0 on a fleet's.
	NodeIP netip.Addr
	// Subnet is the node's pod range.
	Subnet netip.Prefix
	// Iptables is which iptables the node's programs lead to (a fleet
	// node's own alternatives; MachineIptables on a single node).
	Iptables Iptables

	dir     string
	bridge  string
	gateway netip.Prefix // the pods' gateway on the bridge (NodeIP on a single node)
	// launcher starts the node's processes: the API server's on a single
	// node, one entering the node's namespaces (ns) on a fleet's.
	launcher *launcher
	ns       *nodeNS
	// joined: a fleet node, which shares its API server and controllers
	// with the fleet and never stops them.
	joined bool
	// clusterCIDR, on a Flannel fleet's control node: the controller
	// manager allocates each node a /24 of it.
	clusterCIDR netip.Prefix
	components  []*proc    // started after the API server, stopped before it
	netnsPaths  []string   // sandboxes' network namespaces seen at teardown or reboot
	netnsMu     sync.Mutex // netnsPaths, which teardown appends to from several goroutines
	timeout     time.Duration
	lastReboot  time.Duration // see LastRebootDuration
	abortState
}

// NodeName is the node's name in the API.
const NodeName = "istio-cni-test-node"

// SandboxImage is containerd's pause image; the test image tarball
// provides it (see ImportImage).
const SandboxImage = "istio-cni-test/pause:1"

// StartNode brings the node up and returns once it is Ready, its default
// ServiceAccount exists and kube-root-ca.crt is published. On error,
// everything started is stopped.
func StartNode(ctx context.Context, o NodeOptions) (_ *Node, err error) {
	if o.Dir == "" || o.Bridge == "" || !o.Subnet.IsValid() {
		return nil, errors.New("cluster: NodeOptions.Dir, Bridge and Subnet are required")
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 3 * time.Minute
	}
	bins, err := nodeBinaries()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// What a killed run left first: its containers would load this run.
	if cleaned, err := SweepStale(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	} else if len(cleaned) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: tore down the nodes a killed run left in %v\n", cleaned)
	}
	if err := register(o.Dir, o.Bridge, o.Detach); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{
		Name:             NodeName,
		CNIBinDir:        filepath.Join(o.Dir, "host", "opt", "cni", "bin"),
		CNINetDir:        filepath.Join(o.Dir, "host", "etc", "cni", "net.d"),
		IstioRunDir:      filepath.Join(o.Dir, "host", "var", "run", "istio-cni"),
		Kubeconfig:       filepath.Join(o.Dir, "admin.kubeconfig"),
		ContainerdSocket: containerdSocket(o.Dir),
		Ctr:              bins.ctr,
		PodLogDir:        filepath.Join(o.Dir, "kubelet", "pod-logs"),
		NetnsDir:         netnsDir(o.Dir),
		Subnet:           o.Subnet,
		dir:              o.Dir,
		bridge:           o.Bridge,
		timeout:          o.StartTimeout,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	n.PrimaryConfig = filepath.Join(n.CNINetDir, "10-bridge.conflist")
	for _, d := range []string{n.CNIBinDir, n.CNINetDir, n.PodLogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if err := n.installPrimaryCNI(o); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The node's address is its pods' gateway, on the bridge made now
	// rather than at the first ADD: kubelet refuses a loopback node IP,
	// and without an address pods cannot read status.hostIP (Istio's
	// injected proxy does).
	n.NodeIP = o.Subnet.Masked().Addr().Next()
	n.gateway = netip.PrefixFrom(n.NodeIP, o.Subnet.Bits())
	if err := createBridge(o.Bridge, n.gateway); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if o.Detach {
		// First, so StopNodeRecorded can clean up after any later step.
		if err := n.record(o.Dir); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	n.APIServer, err = StartAPIServer(ctx, Options{Dir: o.Dir, Node: true, Detach: o.Detach, StartTimeout: o.StartTimeout, AlsoNamed: []netip.Addr{n.NodeIP}})
	if err != nil {
		n.APIServer = nil
		return nil, err
	}
	n.launcher = n.APIServer.launcher
	if err := n.APIServer.Kubeconfig(n.Kubeconfig, AdminToken); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for _, start := range []func(context.Context, nodeBins, string) error{
		n.startContainerd, n.startControllerManager, n.startScheduler, n.startKubelet,
	} {
		if err := start(ctx, bins, o.Dir); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if err := n.waitSettled(ctx); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return n, nil
}

// installPrimaryCNI copies the reference plugins into the node's bin
// directory and writes the primary conflist as a node image would.
func (n *Node) installPrimaryCNI(o NodeOptions) error {
	if err := n.installReferencePlugins(); err != nil {
		return err
	}
	version := o.PrimaryCNIVersion
	if version == "" {
		version = DefaultPrimaryCNIVersion
	}
	conf := map[string]any{
		"cniVersion": version,
		"name":       "k8s-pod-network",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": o.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": o.Subnet.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(o.Dir, "cni-ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.PrimaryConfig, data, 0o644) // #nosec G306 -- CNI configs are world-readable on nodes
}

// installReferencePlugins puts the CNI reference plugins into the node's
// /opt/cni/bin, as a node's OS package does.
func (n *Node) installReferencePlugins() error {
	src, err := referencePluginDir()
	if err != nil {
		return err
	}
	for _, p := range referencePlugins {
		data, err := os.ReadFile(filepath.Join(src, p)) // #nosec G304 -- the reference plugins
		if err != nil {
			return fmt.Errorf("primary CNI: %w", err)
		}
		if err := os.WriteFile(filepath.Join(n.CNIBinDir, p), data, 0o755); err != nil { // #nosec G306 -- executables
			return err
		}
	}
	return nil
}

// waitSettled waits for what pods need: the node Ready, the default
// ServiceAccount, and the CA bundle projected into service-account volumes.
func (n *Node) waitSettled(ctx context.Context) error {
	kubelet := n.components[len(n.components)-1]
	for _, path := range []string{
		"/api/v1/namespaces/default/serviceaccounts/default",
		"/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
	} {
		if err := poll(ctx, kubelet, func(ctx context.Context) error {
			status, body, err := n.Do(ctx, http.MethodGet, path, nil)
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("GET %s: %d %s", path, status, body)
			}
			return err
		}); err != nil {
			return err
		}
	}
	if err := poll(ctx, kubelet, n.nodeReady); err != nil {
		return err
	}
	return poll(ctx, kubelet, n.untaint)
}

// untaint removes the not-ready taint kubelet registers the node with.
// The node lifecycle controller would lift it once the node is Ready, but
// it is off: on a node that is not a cloud VM it would taint and evict.
func (n *Node) untaint(ctx context.Context) error {
	patch := []byte(`[{"op":"remove","path":"/spec/taints"}]`)
	status, body, err := n.Do(ctx, http.MethodPatch, "/api/v1/nodes/"+n.Name, patch)
	if err != nil {
		return err
	}
	// 422: no taints to remove.
	if status != http.StatusOK && status != http.StatusUnprocessableEntity {
		return fmt.Errorf("removing node taints: %d %s", status, body)
	}
	return nil
}

func (n *Node) nodeReady(ctx context.Context) error { return n.readyAfter(ctx, time.Time{}) }

// readyAfter succeeds once the node is Ready by a heartbeat after t. Nothing
// marks a node whose kubelet stopped NotReady (the node lifecycle
// controller is off), so only a fresh heartbeat tells that a restarted
// kubelet found the node ready. Heartbeats have whole seconds: one older
// than t never passes.
func (n *Node) readyAfter(ctx context.Context, t time.Time) error {
	status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/nodes/"+n.Name, nil)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("node %s: %d %s", n.Name, status, body)
	}
	var node struct {
		Status struct {
			Conditions []struct {
				Type, Status, Message string
				LastHeartbeatTime     time.Time
			}
		}
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		switch {
		case c.Type != "Ready":
		case c.Status != "True":
			return fmt.Errorf("node %s not Ready: %s", n.Name, c.Message)
		case !c.LastHeartbeatTime.After(t):
			return fmt.Errorf("node %s: no heartbeat since %s (last %s)", n.Name, t.Format(time.RFC3339), c.LastHeartbeatTime.Format(time.RFC3339))
		default:
			return nil
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", n.Name)
}

// Logs returns the tails of every component's log.
func (n *Node) Logs(lines int) string {
	var out string
	procs := n.components
	if !n.joined && n.APIServer != nil {
		procs = append([]*proc{n.apiProc(), n.etcd}, procs...)
	}
	for _, p := range procs {
		if p != nil {
			out += fmt.Sprintf("--- tail of %s ---\n%s\n", p.log, logTail(p.log, lines))
		}
	}
	return out
}
