package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop takes the node down in the order that leaves nothing behind:
// kubelet (so nothing restarts), every pod sandbox through the CRI (CNI
// DEL, network namespaces released), containerd and leftover shims, the
// controllers, the API server and etcd; then the bridge and any mount
// under the node's directory. Safe to call more than once.
func (n *Node) Stop() error {
	var errs []error
	stopped := map[*proc]bool{}
	stop := func(name string) {
		for _, p := range n.components {
			if p.name == name && !stopped[p] {
				stopped[p] = true
				errs = append(errs, p.stop(n.grace))
			}
		}
	}
	stop("kubelet")
	errs = append(errs, n.cleanPods())
	for _, p := range slices.Backward(n.components) {
		stop(p.name)
	}
	if n.APIServer != nil && !n.joined {
		errs = append(errs, n.APIServer.Stop())
	}
	if n.joined && n.launcher != nil {
		n.launcher.close()
	}
	errs = append(errs, n.cleanHost())
	return errors.Join(errs...)
}

// cleanPods removes the sandboxes while containerd still runs.
func (n *Node) cleanPods() error {
	if _, err := os.Stat(n.ContainerdSocket); err != nil {
		return nil // containerd never started
	}
	if err := n.removeSandboxes(context.Background()); err != nil {
		return fmt.Errorf("removing pod sandboxes: %w", err)
	}
	return nil
}

// cleanHost ends shims of this node's containerd and removes what the node
// left on the host (cleanHost), with any network namespace seen outside
// the node's directory.
func (n *Node) cleanHost() error {
	errs := []error{killShims(n.ContainerdSocket)}
	for _, p := range n.netnsPaths {
		if _, err := os.Stat(p); err == nil {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			errs = append(errs, os.Remove(p))
		}
	}
	errs = append(errs, cleanHost(n.dir, n.bridge))
	unregister(n.bridge)
	return errors.Join(errs...)
}

// killShims SIGKILLs containerd-shim processes serving the containerd at
// socket: they are ours (our containerd started them), and they outlive
// containerd by design.
func killShims(socket string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if !isShimOf(strings.Split(string(cmdline), "\x00"), socket) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

// createBridge makes the node's bridge with the pods' gateway address,
// as the bridge plugin (isGateway) would at the first ADD; it keeps both.
func createBridge(bridge string, gateway netip.Prefix) error {
	for _, args := range [][]string{
		{"link", "add", bridge, "type", "bridge"},
		{"addr", "add", gateway.String(), "dev", bridge},
		{"link", "set", bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("File exists")) { // #nosec G204 -- our own bridge
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// deleteBridge deletes the primary CNI's bridge, if there is one.
func deleteBridge(bridge string) error {
	if bridge == "" {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("Cannot find device")) { // #nosec G204 -- our own bridge's name
		return fmt.Errorf("deleting bridge %s: %v: %s", bridge, err, out)
	}
	return nil
}

// isShimOf tells a containerd shim serving the containerd at socket by
// its command line (it is started with -address <socket>).
func isShimOf(args []string, socket string) bool {
	return strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, socket)
}

// unmountUnder lazily unmounts every mount point below dir, deepest first
// (kubelet's volume tmpfs, containerd's rootfs and shm mounts, the pods'
// network namespaces).
func unmountUnder(dir string) error {
	points, err := mountPoints(dir)
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errors.Join(errs...), err)
}

// mountPoints lists the mount points below dir.
func mountPoints(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	return points, s.Err()
}

// nodeFile records what StopNodeRecorded needs of a detached node.
const nodeFile = "node.json"

type nodeRecord struct {
	Dir    string `json:"dir"`
	Bridge string `json:"bridge"`
}

func (n *Node) record(dir string) error {
	data, err := json.Marshal(nodeRecord{Dir: dir, Bridge: n.bridge})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, nodeFile), data, 0o600)
}

// StopNodeRecorded takes down a detached node started in dir by an earlier
// process, in Stop's order, ending only the recorded processes.
func StopNodeRecorded(dir string) error {
	var r nodeRecord
	data, err := os.ReadFile(filepath.Join(dir, nodeFile)) // #nosec G304 -- our own node directory
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Stopped before the record: stop what the pids file lists.
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", nodeFile, err)
		}
	}
	n := &Node{dir: dir, bridge: r.Bridge, ContainerdSocket: containerdSocket(dir)}
	procs, err := readRecorded(dir)
	if err != nil {
		return err
	}
	const grace = 10 * time.Second
	var errs []error
	for _, p := range procs {
		if p.name == "kubelet" {
			errs = append(errs, p.stop(grace))
		}
	}
	errs = append(errs, n.cleanPods())
	for _, p := range slices.Backward(procs) {
		errs = append(errs, p.stop(grace))
	}
	errs = append(errs, n.cleanHost())
	return errors.Join(errs...)
}
