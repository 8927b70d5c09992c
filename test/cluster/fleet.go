package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// FleetOptions configures StartFleet.
type FleetOptions struct {
	// Dir holds the control plane's state and one directory per node.
	// Required; must exist.
	Dir string
	// Nodes is how many nodes join; default 3, at most 9.
	Nodes int
	// StartTimeout bounds the start of the control plane and of each
	// node; default 5m.
	StartTimeout time.Duration
}

// Fleet is a multi-node cluster on this machine, as kind makes one with
// containers but without a container engine: one control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) in this
// machine's namespaces, and nodes that each run a containerd and a kubelet
// in network, mount and UTS namespaces of their own (nodeNS), with their
// own root, state, CNI directories, run directory and hostname. The nodes'
// network namespaces are joined by a bridge (fleetBridge), on which the
// API server listens, and each routes the others' pod ranges to them.
type Fleet struct {
	*APIServer
	// Kubeconfig is an admin kubeconfig for kubectl.
	Kubeconfig string
	Nodes      []*Node
	control    *Node // the controllers; no kubelet
	stopOnce   sync.Once
	stopErr    error
}

// The fleet's link: a bridge in this machine's network namespace holding
// the API server's address, each node's eth0 on it; node i (from 1) has
// address .(10+i) there and pods in 10.252.i.0/24 on its own bridge.
const fleetBridge = "icnifleet0"

var (
	fleetLink   = netip.MustParsePrefix("10.251.0.0/24")
	fleetHost   = netip.MustParseAddr("10.251.0.1")
	fleetSubnet = func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 252, byte(i), 0}), 24) // #nosec G115 -- at most 9 nodes
	}
	fleetNodeIP = func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 251, 0, byte(10 + i)}) } // #nosec G115 -- at most 9 nodes
)

// FleetNodeName is node i's name (from 1), also its hostname.
func FleetNodeName(i int) string { return fmt.Sprintf("istio-cni-fleet-%d", i) }

// StartFleet brings the control plane up, then the nodes, and returns once
// every node is Ready. On error, everything started is stopped.
func StartFleet(ctx context.Context, o FleetOptions) (_ *Fleet, err error) {
	if o.Dir == "" {
		return nil, errors.New("cluster: FleetOptions.Dir is required")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Nodes < 1 || o.Nodes > 9 {
		return nil, fmt.Errorf("cluster: FleetOptions.Nodes is %d; allowed: 1 to 9", o.Nodes)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 5 * time.Minute
	}
	bins, err := nodeBinaries()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if cleaned, err := SweepStale(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	} else if len(cleaned) > 0 {
		fmt.Fprintf(os.Stderr, "cluster: tore down the nodes a killed run left in %v\n", cleaned)
	}
	// The link is registered as a node's bridge is: a live fleet holds it
	// (one fleet at a time on a machine), a killed one's is torn down.
	if err := register(o.Dir, fleetBridge, false); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := deleteBridge(fleetBridge); err != nil {
		unregister(fleetBridge)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	f := &Fleet{Kubeconfig: filepath.Join(o.Dir, "admin.kubeconfig")}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Stop())
		}
	}()
	if err := createBridge(fleetBridge, netip.PrefixFrom(fleetHost, fleetLink.Bits())); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	f.APIServer, err = StartAPIServer(cctx, Options{Dir: o.Dir, Node: true, Host: fleetHost, StartTimeout: o.StartTimeout})
	if err != nil {
		f.APIServer = nil
		return nil, err
	}
	if err := f.APIServer.Kubeconfig(f.Kubeconfig, AdminToken); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	f.control = &Node{APIServer: f.APIServer, Kubeconfig: f.Kubeconfig, dir: o.Dir, launcher: f.launcher, timeout: o.StartTimeout}
	for _, start := range []func(context.Context, nodeBins, string) error{f.control.startControllerManager, f.control.startScheduler} {
		if err := start(cctx, bins, o.Dir); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	// One at a time: each start is a burst of CPU, and a node that
	// failed names itself.
	for i := 1; i <= o.Nodes; i++ {
		n, err := f.startNode(ctx, bins, o, i)
		if n != nil {
			f.Nodes = append(f.Nodes, n)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: node %s: %w", FleetNodeName(i), err)
		}
	}
	// Every node routes the others' pod ranges through their eth0; this
	// machine routes them all (the API server's webhooks, the tests).
	for _, n := range f.Nodes {
		for _, m := range f.Nodes {
			if m != n {
				if err := n.ns.run("ip", "route", "replace", m.Subnet.String(), "via", m.NodeIP.String()); err != nil {
					return nil, fmt.Errorf("cluster: %w", err)
				}
			}
		}
		if out, err := exec.Command("ip", "route", "replace", n.Subnet.String(), "via", n.NodeIP.String()).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("cluster: route to %s: %w: %s", n.Name, err, out)
		}
	}
	return f, nil
}

// startNode starts fleet node i: its namespaces and link, the primary CNI,
// containerd and kubelet, and waits until the node is Ready.
func (f *Fleet) startNode(ctx context.Context, bins nodeBins, o FleetOptions, i int) (_ *Node, err error) {
	dir := filepath.Join(o.Dir, "nodes", fmt.Sprint(i))
	bridge := fmt.Sprintf("icnifn%d", i)
	opts := NodeOptions{Dir: dir, Bridge: bridge, Subnet: fleetSubnet(i), StartTimeout: o.StartTimeout}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := register(dir, bridge, false); err != nil {
		return nil, err
	}
	n := &Node{
		APIServer:        f.APIServer,
		Name:             FleetNodeName(i),
		CNIBinDir:        filepath.Join(dir, "host", "opt", "cni", "bin"),
		CNINetDir:        filepath.Join(dir, "host", "etc", "cni", "net.d"),
		IstioRunDir:      filepath.Join(dir, "host", "var", "run", "istio-cni"),
		Kubeconfig:       f.Kubeconfig,
		ContainerdSocket: containerdSocket(dir),
		Ctr:              bins.ctr,
		PodLogDir:        filepath.Join(dir, "kubelet", "pod-logs"),
		NetnsDir:         netnsDir(dir),
		NodeIP:           fleetNodeIP(i),
		Subnet:           fleetSubnet(i),
		dir:              dir,
		bridge:           bridge,
		gateway:          netip.PrefixFrom(fleetSubnet(i).Addr().Next(), 24),
		timeout:          o.StartTimeout,
		joined:           true,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	n.PrimaryConfig = filepath.Join(n.CNINetDir, "10-bridge.conflist")
	for _, d := range []string{n.CNIBinDir, n.CNINetDir, n.IstioRunDir, n.PodLogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return n, err
		}
	}
	if err := n.installPrimaryCNI(opts); err != nil {
		return n, err
	}
	if err := os.MkdirAll(n.NetnsDir, 0o755); err != nil {
		return n, err
	}
	ns, err := createNodeNS(dir, n.Name, []hostBind{
		{src: n.CNIBinDir, dst: "/opt/cni/bin"},
		{src: n.CNINetDir, dst: "/etc/cni/net.d"},
		{src: n.IstioRunDir, dst: "/run/istio-cni"},
		{src: n.NetnsDir, dst: "/run/netns", shared: true},
	})
	if err != nil {
		return n, err
	}
	n.ns = &ns
	if err := n.link(i); err != nil {
		return n, err
	}
	n.launcher = newLauncher("")
	n.launcher.enter = ns.enter()
	cctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	for _, start := range []func(context.Context, nodeBins, string) error{n.startContainerd, n.startKubelet} {
		if err := start(cctx, bins, dir); err != nil {
			return n, err
		}
	}
	return n, n.waitReady(cctx)
}

// link joins the node's network namespace to the fleet's bridge (its
// eth0, the node's address) and gives its pods their bridge.
func (n *Node) link(i int) error {
	host := fmt.Sprintf("icnifv%d", i)
	for _, args := range [][]string{
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", n.ns.file("net")},
		{"link", "set", host, "master", fleetBridge},
		{"link", "set", host, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil { // #nosec G204 -- the harness's own link
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", netip.PrefixFrom(n.NodeIP, fleetLink.Bits()).String(), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.gateway.String(), "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if err := n.ns.run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits for the node to be Ready, then lifts the not-ready
// taint (the node lifecycle controller is off; see untaint).
func (n *Node) waitReady(ctx context.Context) error {
	kubelet := n.components[len(n.components)-1]
	if err := poll(ctx, kubelet, n.nodeReady); err != nil {
		return err
	}
	return poll(ctx, kubelet, n.untaint)
}

// Stop takes every node down, then the controllers and the API server,
// then the fleet's link. Safe to call more than once.
func (f *Fleet) Stop() error {
	f.stopOnce.Do(func() {
		var errs []error
		var wg sync.WaitGroup
		errc := make(chan error, len(f.Nodes))
		for _, n := range f.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errc <- n.Stop()
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			errs = append(errs, err)
		}
		if f.control != nil {
			for _, p := range f.control.components {
				errs = append(errs, p.stop(f.control.grace))
			}
		}
		if f.APIServer != nil {
			errs = append(errs, f.APIServer.Stop())
		}
		errs = append(errs, deleteBridge(fleetBridge))
		unregister(fleetBridge)
		f.stopErr = errors.Join(errs...)
	})
	return f.stopErr
}

// Logs returns the tails of the control plane's and every node's logs.
func (f *Fleet) Logs(lines int) string {
	var out string
	if f.control != nil {
		out = f.control.Logs(lines)
	}
	for _, n := range f.Nodes {
		out += n.Logs(lines)
	}
	return out
}
