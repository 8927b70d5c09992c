package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// AuditUsers: the API server logs these users' requests (see
	// Options.AuditUsers and ReadAuditLog).
	AuditUsers []string
	// Iptables is each node's iptables, node i's at index i-1: a mixed
	// fleet, as clusters whose node pools run different images are.
	// Nodes past its end are MachineIptables.
	Iptables []Iptables
	// Primary is the nodes' primary CNI (PrimaryBridge by default).
	// With PrimaryFlannel, StartFleet returns once every node has
	// registered and has its pod range, NotReady: no primary has
	// written its config yet. InstallFlannel (and istio-cni, in either
	// order), then WaitReady.
	Primary Primary
	// Started, if set, is called with the fleet as soon as there is one
	// to abort (Fleet.Abort), before any node starts: a signal during a
	// start of minutes must find it.
	Started func(*Fleet)
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
	// Nodes are the nodes, once StartFleet returned.
	Nodes []*Node
	// Primary is the nodes' primary CNI (FleetOptions.Primary).
	Primary Primary
	control *Node // the controllers; no kubelet
	opts    FleetOptions
	// mu guards starting, the nodes begun so far (Nodes while StartFleet
	// runs), which Abort reads from another goroutine.
	mu       sync.Mutex
	starting []*Node
	// hostDirs is the claim on the nodes' mount points on this machine
	// (ClaimHostDirs), made before the fleet is published to Abort.
	hostDirs *HostDirs
	stopOnce sync.Once
	stopErr  error
}

// FleetNodeName is node i's name (from 1), also its hostname.
func FleetNodeName(i int) string { return fmt.Sprintf("istio-cni-fleet-%d", i) }

// StartFleet brings the control plane up, then the nodes, and returns once
// every node is Ready (with PrimaryFlannel: registered, with its pod
// range; see FleetOptions.Primary). On error, everything started is
// stopped.
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
	if len(o.Iptables) > o.Nodes {
		return nil, fmt.Errorf("cluster: FleetOptions.Iptables names %d nodes' iptables; allowed: at most Nodes (%d)", len(o.Iptables), o.Nodes)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 5 * time.Minute
	}
	if o.Primary != PrimaryBridge && o.Primary != PrimaryFlannel {
		return nil, fmt.Errorf("cluster: FleetOptions.Primary is %q; allowed: %q (bridge) or %q", o.Primary, PrimaryBridge, PrimaryFlannel)
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
	// Its entry's directory holds nothing else: the nodes' own entries
	// tear the nodes down, whatever order the sweep takes them in.
	linkDir := filepath.Join(o.Dir, "link")
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		return nil, err
	}
	if err := register(linkDir, fleetBridge, false); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := deleteBridge(fleetBridge); err != nil {
		unregister(fleetBridge)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// After the bridge of a run that left no entry is gone, its routes
	// with it.
	if err := fleetRangesFree(o.Nodes, o.Primary); err != nil {
		unregister(fleetBridge)
		return nil, fmt.Errorf("cluster: %w", err)
	}
	f := &Fleet{Kubeconfig: filepath.Join(o.Dir, "admin.kubeconfig"), Primary: o.Primary, opts: o}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Stop())
		}
	}()
	if f.hostDirs, err = ClaimHostDirs(nodeMountPoints(o.Primary)...); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if o.Started != nil {
		o.Started(f)
	}
	if err := createBridge(fleetBridge, netip.PrefixFrom(fleetHost, fleetLink.Bits())); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	api, err := StartAPIServer(cctx, Options{Dir: o.Dir, Node: true, Host: fleetHost, StartTimeout: o.StartTimeout, AuditUsers: o.AuditUsers})
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.APIServer = api
	f.mu.Unlock()
	if err := f.APIServer.Kubeconfig(f.Kubeconfig, AdminToken); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	control := &Node{APIServer: api, Kubeconfig: f.Kubeconfig, dir: o.Dir, launcher: api.launcher, timeout: o.StartTimeout}
	if o.Primary == PrimaryFlannel {
		control.clusterCIDR = FlannelNetwork
	}
	f.mu.Lock()
	f.control = control
	f.mu.Unlock()
	for _, start := range []func(context.Context, nodeBins, string) error{control.startControllerManager, control.startScheduler} {
		if err := start(cctx, bins, o.Dir); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	// One at a time: each start is a burst of CPU, and a node that
	// failed names itself.
	for i := 1; i <= o.Nodes; i++ {
		ipt := MachineIptables
		if i <= len(o.Iptables) {
			ipt = o.Iptables[i-1]
		}
		if _, err := f.startNode(ctx, bins, o, i, ipt, nil); err != nil {
			return nil, fmt.Errorf("cluster: node %s: %w", FleetNodeName(i), err)
		}
	}
	f.Nodes = f.nodes()
	for _, n := range f.Nodes {
		if err := f.route(n); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// route routes n's pod range from this machine (the API server's
// webhooks, the tests) and, on a bridge fleet, between n and every other
// node through their eth0s (on a Flannel fleet, flanneld routes them
// through its vxlan device).
func (f *Fleet) route(n *Node) error {
	for _, m := range f.Nodes {
		if m == n || f.Primary != PrimaryBridge {
			continue
		}
		if err := n.ns.run("ip", "route", "replace", m.Subnet.String(), "via", m.NodeIP.String()); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := m.ns.run("ip", "route", "replace", n.Subnet.String(), "via", n.NodeIP.String()); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if out, err := exec.Command("ip", "route", "replace", n.Subnet.String(), "via", n.NodeIP.String()).CombinedOutput(); err != nil {
		return fmt.Errorf("cluster: route to %s: %w: %s", n.Name, err, out)
	}
	return nil
}

// AddNode joins one more node to the running fleet, as a node a cluster
// autoscaler adds: its containerd holding images (a node image's
// preloaded ones) before its kubelet registers, its iptables ipt's. It returns once the node
// is Ready (on a Flannel fleet: registered with its pod range; the
// DaemonSets already installed take it from there, and the caller waits
// with WaitNodeReady).
func (f *Fleet) AddNode(ctx context.Context, ipt Iptables, images ...string) (*Node, error) {
	i := len(f.Nodes) + 1
	if i > 9 {
		return nil, fmt.Errorf("cluster: the fleet has %d nodes; at most 9", len(f.Nodes))
	}
	if f.Primary == PrimaryBridge { // a Flannel fleet's whole network was checked at its start
		if out, err := exec.Command("ip", "-4", "route", "show", "root", fleetSubnet(i).String()).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" { // #nosec G204 -- the fleet's own range
			return nil, fmt.Errorf("cluster: this machine routes in %s (%s %v): node %d's range", fleetSubnet(i), out, err, i)
		}
	}
	bins, err := nodeBinaries()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n, err := f.startNode(ctx, bins, f.opts, i, ipt, images)
	if err != nil {
		// Stop and Abort still take it down: it stays in starting.
		return nil, fmt.Errorf("cluster: node %s: %w", FleetNodeName(i), err)
	}
	f.Nodes = append(f.Nodes, n)
	return n, f.route(n)
}

// WaitNodeReady waits until n is Ready, then lifts the not-ready taint.
func (f *Fleet) WaitNodeReady(ctx context.Context, n *Node) error { return n.waitReady(ctx) }

// RemoveNode takes the last node AddNode joined out of the fleet: stops it
// (its pods' sandboxes removed while containerd runs), deletes its Node
// and the pods bound to it (the DaemonSets' among them, which the pod
// garbage collector would leave for up to a minute), and its route.
func (f *Fleet) RemoveNode(ctx context.Context, n *Node) error {
	if len(f.Nodes) == 0 || f.Nodes[len(f.Nodes)-1] != n {
		return fmt.Errorf("cluster: %s is not the fleet's last node", n.Name)
	}
	err := n.Stop()
	if status, body, derr := f.Do(ctx, http.MethodDelete, "/api/v1/nodes/"+n.Name, nil); derr != nil || (status != http.StatusOK && status != http.StatusNotFound) {
		err = errors.Join(err, fmt.Errorf("deleting node %s: %d %s %v", n.Name, status, body, derr))
	}
	// No kubelet is left to confirm their end: deleted at once.
	if out, kerr := f.Kubectl(ctx, "delete", "pods", "--all-namespaces", "--field-selector", "spec.nodeName="+n.Name, "--force", "--grace-period=0", "--wait=true"); kerr != nil {
		err = errors.Join(err, fmt.Errorf("deleting node %s's pods: %w: %s", n.Name, kerr, out))
	}
	if out, rerr := exec.Command("ip", "route", "del", n.Subnet.String()).CombinedOutput(); rerr != nil { // #nosec G204 -- the fleet's own route
		err = errors.Join(err, fmt.Errorf("route to %s: %w: %s", n.Name, rerr, out))
	}
	f.Nodes = f.Nodes[:len(f.Nodes)-1]
	f.mu.Lock()
	f.starting = slices.DeleteFunc(f.starting, func(m *Node) bool { return m == n })
	f.mu.Unlock()
	return err
}

// nodes are the nodes begun so far.
func (f *Fleet) nodes() []*Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starting)
}

// fleetPodBridge is the primary CNI's bridge in every node's own network
// namespace (Flannel's delegate names its bridge the same).
const fleetPodBridge = "cni0"

// startNode starts fleet node i: its namespaces and link, the primary CNI,
// containerd and kubelet, and waits until the node is Ready. Its iptables
// is ipt's. The node is the fleet's (Stop, Abort) from its first step.
func (f *Fleet) startNode(ctx context.Context, bins nodeBins, o FleetOptions, i int, ipt Iptables, images []string) (*Node, error) {
	dir := filepath.Join(o.Dir, "nodes", fmt.Sprint(i))
	// The node's name on this machine: its end of the link, its
	// registry entry, its cgroup root. Deleting it (cleanHost, also a
	// killed run's sweep) unlinks the node at once.
	hostLink := fmt.Sprintf("icnifv%d", i)
	// The fleet's primaries say CNI 1.0.0: the runtime never calls
	// STATUS there, the case single nodes (1.1.0) no longer cover.
	opts := NodeOptions{Dir: dir, Bridge: fleetPodBridge, Subnet: fleetSubnet(i), StartTimeout: o.StartTimeout, PrimaryCNIVersion: "1.0.0"}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := register(dir, hostLink, false); err != nil {
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
		Iptables:         ipt,
		dir:              dir,
		bridge:           hostLink,
		gateway:          netip.PrefixFrom(fleetSubnet(i).Addr().Next(), 24),
		timeout:          o.StartTimeout,
		joined:           true,
	}
	f.mu.Lock()
	f.starting = append(f.starting, n)
	f.mu.Unlock()
	n.PrimaryConfig = filepath.Join(n.CNINetDir, "10-bridge.conflist")
	binds := []hostBind{
		{src: n.CNIBinDir, dst: "/opt/cni/bin"},
		{src: n.CNINetDir, dst: "/etc/cni/net.d"},
		{src: n.IstioRunDir, dst: "/run/istio-cni"},
		{src: n.NetnsDir, dst: "/run/netns", shared: true},
	}
	if o.Primary == PrimaryFlannel {
		n.PrimaryConfig = filepath.Join(n.CNINetDir, FlannelConflist)
		for _, d := range flannelNodeDirs {
			binds = append(binds, hostBind{src: filepath.Join(dir, "host", d), dst: d})
		}
	}
	for _, b := range binds {
		if err := os.MkdirAll(b.src, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(n.PodLogDir, 0o755); err != nil {
		return nil, err
	}
	alt, err := nodeAlternatives(filepath.Join(dir, "host", "etc", "alternatives"), ipt)
	if err != nil {
		return nil, err
	}
	binds = append(binds, alt...)
	install := func() error { return n.installPrimaryCNI(opts) }
	if o.Primary == PrimaryFlannel {
		install = n.installReferencePlugins
	}
	if err := install(); err != nil {
		return nil, err
	}
	ns, err := createNodeNS(dir, n.Name, binds)
	if err != nil {
		return nil, err
	}
	n.ns = &ns
	if err := n.link(o.Primary == PrimaryBridge); err != nil {
		return nil, err
	}
	n.launcher = newLauncher("")
	n.launcher.enter = ns.enter()
	cctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := n.startContainerd(cctx, bins, dir); err != nil {
		return nil, err
	}
	if err := n.ImportImages(cctx, images...); err != nil {
		return nil, err
	}
	if err := n.startKubelet(cctx, bins, dir); err != nil {
		return nil, err
	}
	if o.Primary == PrimaryFlannel {
		return n, n.waitPodCIDR(cctx)
	}
	return n, n.waitReady(cctx)
}

// nodeMountPoints are where a fleet node's directories are bound.
func nodeMountPoints(p Primary) []string {
	points := []string{"/opt/cni/bin", "/etc/cni/net.d", "/run/istio-cni", "/run/netns"}
	if p == PrimaryFlannel {
		points = append(points, flannelNodeDirs...)
	}
	return points
}

// link joins the node's network namespace to the fleet's bridge by a veth
// (n.bridge here, eth0 with the node's address in the node) and, with
// podBridge, gives its pods their bridge (Flannel's plugin makes its own).
// A link of that name a killed run left goes first.
func (n *Node) link(podBridge bool) error {
	if err := deleteBridge(n.bridge); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "veth", "peer", "name", "eth0", "netns", n.ns.file("net")},
		{"link", "set", n.bridge, "master", fleetBridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil { // #nosec G204 -- the harness's own link
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	steps := [][]string{
		{"addr", "add", netip.PrefixFrom(n.NodeIP, fleetLink.Bits()).String(), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
	}
	if podBridge {
		steps = append(steps, [][]string{
			{"link", "add", fleetPodBridge, "type", "bridge"},
			{"addr", "add", n.gateway.String(), "dev", fleetPodBridge},
			{"link", "set", fleetPodBridge, "up"},
		}...)
	}
	for _, args := range steps {
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
		nodes := f.nodes()
		errc := make(chan error, len(nodes))
		for _, n := range nodes {
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
		errs = append(errs, deleteBridge(fleetBridge), f.hostDirs.Release())
		unregister(fleetBridge)
		f.stopErr = errors.Join(errs...)
	})
	return f.stopErr
}

// Abort tears the fleet down at once, for a signal or a deadline: every
// node's Abort (its containers SIGKILLed by its shims and cgroups, no CRI
// call) side by side, then the control plane, the link and the mount
// points. Safe beside a Stop or a start under way.
func (f *Fleet) Abort() error {
	var wg sync.WaitGroup
	nodes := f.nodes()
	errs := make([]error, len(nodes)+1)
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.Abort() })
	}
	wg.Wait()
	// The control plane's processes die with this one anyway (Pdeathsig);
	// ending them now frees the cores for the rest.
	f.mu.Lock()
	control, api := f.control, f.APIServer
	var comps []*proc
	if control != nil {
		comps = slices.Clone(control.components)
	}
	f.mu.Unlock()
	for _, p := range comps {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
		}
	}
	if api != nil {
		api.mu.Lock()
		if api.apiserv != nil && !api.apiserv.exited() {
			_ = api.apiserv.cmd.Process.Kill()
		}
		api.mu.Unlock()
		if api.etcd != nil && !api.etcd.exited() {
			_ = api.etcd.cmd.Process.Kill()
		}
	}
	// The link's entry stays: a start still under way may make the
	// bridge after this, and the process exits next (AbortOnSignal), so
	// the next run's sweep finds the entry's owner gone and takes down
	// whatever is left.
	errs[len(nodes)] = errors.Join(deleteBridge(fleetBridge), f.hostDirs.Release())
	return errors.Join(errs...)
}

// Logs returns the tails of the control plane's and every node's logs.
func (f *Fleet) Logs(lines int) string {
	var out string
	if f.control != nil {
		out = f.control.Logs(lines)
	}
	for _, n := range f.nodes() {
		out += n.Logs(lines)
	}
	return out
}
