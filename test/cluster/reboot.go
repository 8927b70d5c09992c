package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// RebootOptions shapes Node.Reboot.
type RebootOptions struct {
	// Down is how long the node stays down, from stopping kubelet to
	// starting containerd again; 0 starts it as soon as the reboot's
	// cleanup is done. The cleanup and WhileDown count towards it; if
	// they take longer, the node starts right after them.
	Down time.Duration
	// WhileDown, if set, runs once everything is stopped and cleaned and
	// before the start, to check what a reboot leaves. An error ends
	// Reboot with the node left down; Stop still tears it down.
	WhileDown func() error
}

// Reboot simulates a reboot of the node's host; the API server, etcd, the
// controllers and the scheduler (the control plane, elsewhere on a real
// cluster) keep running. In order: kubelet stops; every container process
// is SIGKILLed, as a power cut would end it; containerd stops; what lives
// in memory or on tmpfs goes: the pods' network namespaces, the bridge, the
// node's /var/run/istio-cni, containerd's state (/run/containerd) and
// kubelet's volume mounts. What is on disk stays: kubelet's and
// containerd's roots (with the imported images), the CNI binaries and
// configs, the IPAM store. Then, after opts.Down, containerd and kubelet
// start again exactly as before (same binaries, arguments, config files,
// ports and logs) and Reboot returns once the node reports Ready by a
// fresh heartbeat. As after a real reboot, kubelet then tears each pod's
// dead sandbox down (CNI DEL, with no netns left) and makes a new one (CNI
// ADD) in which the containers start again.
//
// It must not run concurrently with Stop. LastRebootDuration tells how long
// the node took to come back.
func (n *Node) Reboot(ctx context.Context, opts RebootOptions) error {
	kubelet, containerd := n.component("kubelet"), n.component("containerd")
	if kubelet == nil || containerd == nil || kubelet.exited() || containerd.exited() {
		return errors.New("cluster: reboot: kubelet and containerd must be running")
	}
	// List the namespaces before touching anything, so that a failure
	// leaves the node as it was.
	netns, err := n.podNetNSPaths()
	if err != nil {
		return fmt.Errorf("cluster: reboot: listing pod network namespaces: %w", err)
	}
	down := time.Now()
	if err := kubelet.stop(n.grace); err != nil {
		return fmt.Errorf("cluster: reboot: %w", err)
	}
	// A heartbeat after this is the restarted kubelet's; the old one may
	// have sent one while it was stopping.
	kubeletGone := time.Now()
	// Ask again for any sandbox kubelet made meanwhile; nothing makes one
	// now. So for the shims' files outside the node's directory: once a
	// shim dies, containerd may delete its bundle, which names them.
	if more, err := n.podNetNSPaths(); err == nil {
		netns = union(netns, more)
	}
	n.netnsPaths = append(n.netnsPaths, netns...) // for Stop, should Reboot fail
	if err := n.powerOff(containerd, netns, shimSockets(n.dir)); err != nil {
		return fmt.Errorf("cluster: reboot: %w", err)
	}
	if opts.WhileDown != nil {
		if err := opts.WhileDown(); err != nil {
			return fmt.Errorf("cluster: reboot: while down: %w", err)
		}
	}
	t := time.NewTimer(time.Until(down.Add(opts.Down)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("cluster: reboot: node left down: %w", ctx.Err())
	case <-t.C:
	}
	if err := n.boot(ctx, kubelet, containerd, kubeletGone); err != nil {
		return fmt.Errorf("cluster: reboot: %w", err)
	}
	n.lastReboot = time.Since(down)
	return nil
}

// LastRebootDuration is how long the last successful Reboot took from
// stopping kubelet until the node was Ready again, Down included; 0 before
// one.
func (n *Node) LastRebootDuration() time.Duration { return n.lastReboot }

// component is the running (or last) process of that name.
func (n *Node) component(name string) *proc {
	for _, p := range n.components {
		if p.name == name {
			return p
		}
	}
	return nil
}

// replaceComponent puts p in old's place, so Stop ends p in old's turn.
func (n *Node) replaceComponent(old, p *proc) {
	for i := range n.components {
		if n.components[i] == old {
			n.components[i] = p
		}
	}
}

// podNetNSPaths lists the network namespaces of every pod sandbox, ready
// or not: containerd binds each under the node's NetnsDir
// (netns_mounts_under_state_dir); hostNetwork sandboxes have none. The
// directory, not the CRI: containerd 2 answers PodSandboxStatus for a
// sandbox whose shim is still starting with DeadlineExceeded (cold30's
// TestChaos failed on it), and a sandbox being made now has its
// namespace bound here already.
func (n *Node) podNetNSPaths() ([]string, error) {
	entries, err := os.ReadDir(n.NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, filepath.Join(n.NetnsDir, e.Name()))
	}
	return paths, nil
}

// union appends to a the elements of b it lacks.
func union(a, b []string) []string {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// powerOff, once kubelet has stopped (or it would restart the containers),
// ends the containers and containerd, and loses what a reboot loses.
// socks are the shims' sockets listed while containerd ran; the list is
// taken again once it is dead, for shims it started meanwhile.
func (n *Node) powerOff(containerd *proc, netns, socks []string) error {
	if err := killContainers(n.ContainerdSocket, cgroupRootName(n.bridge)); err != nil {
		return err
	}
	if err := containerd.stop(n.grace); err != nil {
		return err
	}
	// Seeing its shims die, containerd ran "containerd-shim-runc-v2
	// delete" for each to clean up; any still running outlived it.
	if err := killContainers(n.ContainerdSocket, cgroupRootName(n.bridge)); err != nil {
		return err
	}
	if err := killInNetNS(netns); err != nil {
		return err
	}
	return n.wipeVolatile(netns, union(socks, shimSockets(n.dir)))
}

// wipeVolatile removes what a reboot removes, the node's kernel objects and
// its tmpfs (/run, /var/run) contents, and nothing on disk. Two things a
// reboot loses stay: the host's iptables rules, which this machine's other
// nodes share, and the pods' (now empty) cgroups below the node's cgroup
// root, which kubelet takes over again on start (runc makes new ones for
// the new containers); Stop removes them.
func (n *Node) wipeVolatile(netns, socks []string) error {
	var errs []error
	for _, p := range netns {
		// Nothing runs in the namespace any more: unmounting the
		// /var/run/netns bind mount frees it, and its veth with it.
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	// boot makes it again, with the node's address.
	errs = append(errs, deleteBridge(n.bridge))
	errs = append(errs, emptyDir(n.IstioRunDir))
	for _, s := range socks {
		errs = append(errs, removeIfExists(s))
	}
	errs = append(errs, n.wipeContainerdState())
	errs = append(errs, unmountKubeletRoot(n.kubeletRootDir()))
	return errors.Join(errs...)
}

// unmountKubeletRoot undoes kubelet's mounts: the tmpfs of secret and
// projected volumes below root, and root's bind mount onto itself (kubelet
// makes it a shared mount). The directory is on disk; kubelet mounts all
// of it again when it starts.
func unmountKubeletRoot(root string) error {
	err := unmountUnder(root)
	if uerr := syscall.Unmount(root, syscall.MNT_DETACH); uerr != nil && !errors.Is(uerr, syscall.EINVAL) && !errors.Is(uerr, syscall.ENOENT) {
		err = errors.Join(err, fmt.Errorf("unmounting %s: %w", root, uerr))
	}
	return err
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// shimSockets lists the sockets of the node in dir's shims: the one thing
// they keep outside the node's directory, in /run/containerd/s
// (containerd's socket_dir takes at most 42 characters; runc's state is
// under the node's, runcRoot). Each task
// bundle in containerd's state names its shim's address in bootstrap.json
// (containerd 2; `address` before), so no other node's are touched.
func shimSockets(dir string) []string {
	state := filepath.Join(filepath.Dir(containerdSocket(dir)), "state")
	bundles, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*"))
	var socks []string
	for _, b := range bundles {
		sock, ok := shimAddress(b)
		if ok && strings.HasPrefix(sock, "/run/containerd/s/") && !slices.Contains(socks, sock) {
			socks = append(socks, sock)
		}
	}
	return socks
}

// removeShimSockets removes the sockets of the node in dir's shims, once
// none runs.
func removeShimSockets(dir string) error {
	var errs []error
	for _, s := range shimSockets(dir) {
		errs = append(errs, removeIfExists(s))
	}
	return errors.Join(errs...)
}

// shimAddress is the socket path of bundle's shim.
func shimAddress(bundle string) (string, bool) {
	var addr string
	if data, err := os.ReadFile(filepath.Join(bundle, "bootstrap.json")); err == nil { // #nosec G304 -- containerd's bundle
		var boot struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(data, &boot) != nil {
			return "", false
		}
		addr = boot.Address
	} else if data, err := os.ReadFile(filepath.Join(bundle, "address")); err == nil { // #nosec G304 -- containerd's bundle
		addr = string(data)
	}
	addr = strings.TrimPrefix(strings.TrimSpace(addr), "unix://")
	return addr, addr != ""
}

// wipeContainerdState removes containerd's state dir (task bundles with
// their rootfs mounts, sandbox shm), and its sockets: on a real node both
// are on /run/containerd.
func (n *Node) wipeContainerdState() error {
	base := filepath.Dir(n.ContainerdSocket)
	state := filepath.Join(base, "state")
	if err := unmountUnder(state); err != nil {
		// Removing the state through a rootfs still mounted would
		// delete that container's files: keep it all instead.
		return err
	}
	errs := []error{os.RemoveAll(state)}
	for _, s := range []string{n.ContainerdSocket, n.ContainerdSocket + ".ttrpc", filepath.Join(base, "debug.sock")} {
		errs = append(errs, removeIfExists(s))
	}
	return errors.Join(errs...)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// boot starts containerd and kubelet again as they were started and waits
// for the node to be Ready by a heartbeat after kubeletGone.
func (n *Node) boot(ctx context.Context, kubelet, containerd *proc, kubeletGone time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	// The state directory went with the reboot, and with it the shared
	// mount of the namespaces' directory in it.
	if err := shareDir(n.NetnsDir); err != nil {
		return err
	}
	// The node's address, as a real node's comes back with its interface.
	if err := createBridge(n.bridge, n.gateway); err != nil {
		return err
	}
	c, err := n.launcher.restart(containerd)
	if err != nil {
		return err
	}
	n.replaceComponent(containerd, c)
	if err := n.waitContainerd(ctx, c); err != nil {
		return err
	}
	// As startKubelet: kubelet requires its cgroup root.
	if err := createCgroupRoot(cgroupRootName(n.bridge)); err != nil {
		return fmt.Errorf("cgroup root for kubelet: %w", err)
	}
	k, err := n.launcher.restart(kubelet)
	if err != nil {
		return err
	}
	n.replaceComponent(kubelet, k)
	// Kubelet taints a node only when it first registers it.
	return poll(ctx, k, func(ctx context.Context) error { return n.readyAfter(ctx, kubeletGone) })
}
