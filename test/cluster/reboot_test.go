package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A rebooted node loses its pods' processes and network namespaces, the
// bridge and everything on its tmpfs, comes back Ready, and kubelet runs
// the pod again in a new sandbox from the image that survived on disk.
// Twice: the second reboot restarts what the first one restarted. Stop
// then leaves nothing behind.
func TestReboot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cluster: needs root")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	image, err := cluster.BuildTestImage(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const bridge = "icnireboot0"
	n, stop := startNode(t, bridge, "10.94.0.0/24")
	if err := n.ImportImages(ctx, image); err != nil {
		t.Fatal(err)
	}
	if err := n.CreatePod(ctx, cluster.PodSpec{Namespace: "default", Name: "server", Server: true}.JSON()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitRunning(ctx, "default", "server"); err != nil {
		t.Fatal(err)
	}
	var gone []string // what the reboots removed, then what Stop must
	for i, down := range []time.Duration{2 * time.Second, 0} {
		gone = append(gone, rebootOnce(ctx, t, n, bridge, down)...)
		t.Logf("reboot %d (down %v): the node was Ready %v after kubelet stopped",
			i+1, down, n.LastRebootDuration().Round(time.Millisecond))
	}

	netns, err := n.PodNetNS(ctx, "default", "server")
	if err != nil {
		t.Fatal(err)
	}
	gone = append(append(gone, netns), shimSockets(ctx, t, n)...)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireNothingLeft(t, n, bridge, gone)
}

// rebootOnce reboots n with a running pod "server", checks what the node
// lost while down and that the pod runs again in a new sandbox, and
// returns the pod's netns and shim sockets from before.
func rebootOnce(ctx context.Context, t *testing.T, n *cluster.Node, bridge string, down time.Duration) []string {
	t.Helper()
	oldNetNS, err := n.PodNetNS(ctx, "default", "server")
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(oldNetNS, &st); err != nil {
		t.Fatal(err)
	}
	// Held open until checked while down: a namespace freed gives its
	// inode number to the next one made (the e2e's pods, beside this
	// test), whose processes would look like the old one's.
	held, err := os.Open(oldNetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }()
	if procs := inNetNS(st.Ino); len(procs) < 2 { // pause and the server
		t.Fatalf("processes in the pod's network namespace: %v, want at least 2", procs)
	}
	for _, f := range []string{"istio-cni-kubeconfig", "sub/file"} {
		p := filepath.Join(n.IstioRunDir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	socks := shimSockets(ctx, t, n)
	if len(socks) == 0 {
		t.Fatal("found no shim socket for the node's containers")
	}
	whileDown := func() error {
		if left := inNetNS(st.Ino); len(left) > 0 {
			t.Errorf("processes still in the pod's network namespace: %v", left)
		}
		_ = held.Close() // the namespace goes now, as a reboot's does
		requireLost(t, n, bridge, append(socks, oldNetNS)...)
		if !exists(n.IstioRunDir) {
			t.Errorf("%s is gone; only its contents should be", n.IstioRunDir)
		}
		return nil
	}
	rebooted := time.Now()
	if err := n.Reboot(ctx, cluster.RebootOptions{Down: down, WhileDown: whileDown}); err != nil {
		t.Fatal(err)
	}
	if took := n.LastRebootDuration(); took < down {
		t.Errorf("LastRebootDuration %v, want at least Down (%v)", took, down)
	}

	// The pod's status still says Running from before: wait for kubelet
	// to have made a new sandbox and started the container in it.
	poll.Until(t, time.Minute, "a new sandbox for the pod", func() (bool, string) {
		p, err := n.PodNetNS(ctx, "default", "server")
		return err == nil && p != oldNetNS, fmt.Sprintf("%q %v", p, err)
	})
	poll.Until(t, time.Minute, "the pod's container started again", func() (bool, string) {
		p, found, err := n.GetPod(ctx, "default", "server")
		if err != nil || !found || len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("%+v %v %v", p.Status, found, err)
		}
		c := p.Status.ContainerStatuses[0]
		var running struct{ StartedAt time.Time }
		if raw, ok := c.State["running"]; ok {
			_ = json.Unmarshal(raw, &running)
		}
		return p.Status.Phase == "Running" && c.Ready && running.StartedAt.After(rebooted.Truncate(time.Second)),
			fmt.Sprintf("phase %s, %+v", p.Status.Phase, c)
	})
	if exists(oldNetNS) {
		t.Errorf("the old sandbox's netns %s is back", oldNetNS)
	}
	if e := dirEntries(n.IstioRunDir); len(e) > 0 {
		t.Errorf("%s after the reboot: %v, want it empty", n.IstioRunDir, e)
	}
	return append(socks, oldNetNS)
}

// requireLost checks, while the node is down, that what a reboot loses is
// gone (lost names more: the pod's netns, shim sockets) and what is on
// disk is not.
func requireLost(t *testing.T, n *cluster.Node, bridge string, lost ...string) {
	t.Helper()
	// containerd and its shims name containerd's directory; kubelet its.
	for _, dir := range []string{filepath.Dir(n.ContainerdSocket), filepath.Dir(n.PodLogDir)} {
		if left := pidsMentioning(t, dir); len(left) > 0 {
			t.Errorf("processes of the node still running: %v", left)
		}
	}
	lost = append(lost, filepath.Join(filepath.Dir(n.ContainerdSocket), "state"), n.ContainerdSocket)
	for _, p := range lost {
		if exists(p) {
			t.Errorf("%s survived the reboot", p)
		}
	}
	if linkExists(bridge) {
		t.Errorf("bridge %s survived the reboot", bridge)
	}
	if e := dirEntries(n.IstioRunDir); len(e) > 0 {
		t.Errorf("%s after the reboot: %v, want it empty", n.IstioRunDir, e)
	}
	if m := mountsUnder(t, n.Dir); len(m) > 0 {
		t.Errorf("mounts under the node's directory survived the reboot: %v", m)
	}
	for _, p := range []string{n.PrimaryConfig, filepath.Join(n.CNIBinDir, "bridge"), filepath.Join(filepath.Dir(n.ContainerdSocket), "root")} {
		if !exists(p) {
			t.Errorf("%s, on disk, is gone after the reboot", p)
		}
	}
}

// requireNothingLeft checks what a stopped node must not leave behind:
// no process, mount, bridge or cgroup, nor any of paths.
func requireNothingLeft(t *testing.T, n *cluster.Node, bridge string, paths []string) {
	t.Helper()
	if left := pidsMentioning(t, n.Dir); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	for _, p := range paths {
		if exists(p) {
			t.Errorf("%s left after Stop", p)
		}
	}
	if linkExists(bridge) {
		t.Errorf("bridge %s left after Stop", bridge)
	}
	if m := mountsUnder(t, n.Dir); len(m) > 0 {
		t.Errorf("mounts left after Stop: %v", m)
	}
	// The node's cgroup root is named after its bridge (cgroup v1: one
	// per hierarchy; v2: one).
	for _, pattern := range []string{"/sys/fs/cgroup/*/*" + bridge + "*", "/sys/fs/cgroup/*" + bridge + "*"} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("cgroups left after Stop: %v", left)
		}
	}
}

// A reboot whose WhileDown hook fails returns its error without waiting
// out Down and leaves the node down; Stop still tears it all down.
func TestRebootLeftDown(t *testing.T) {
	const bridge = "icnidown0"
	n, stop := startNode(t, bridge, "10.92.0.0/24")
	errCheck := errors.New("check failed")
	// Down outlasts any test run: a Reboot that waited it out after
	// WhileDown failed would end with ctx's error, not errCheck. ctx only
	// turns such a hang into that failure.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	err := n.Reboot(ctx, cluster.RebootOptions{Down: 24 * time.Hour, WhileDown: func() error { return errCheck }})
	if !errors.Is(err, errCheck) {
		t.Fatalf("Reboot with a failing WhileDown: %v, want %v", err, errCheck)
	}
	if ctx.Err() != nil {
		t.Errorf("Reboot returned only once its context ended (%v): it waited out Down after WhileDown failed, or its power-off hung", ctx.Err())
	}
	requireLost(t, n, bridge)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	requireNothingLeft(t, n, bridge, nil)
}
