package cluster_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// startNode starts a node under t.TempDir() and stops it in t.Cleanup,
// also when the test fails; the returned stop is the same, once.
func startNode(t *testing.T, bridge, subnet string) (*cluster.Node, func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cluster: needs root")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	n, err := cluster.StartNode(ctx, cluster.NodeOptions{
		Dir: t.TempDir(), Bridge: bridge, Subnet: netip.MustParsePrefix(subnet),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceValue(n.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.Logs(40))
		}
		if err := stop(); err != nil {
			t.Errorf("stopping the node: %v", err)
		}
	})
	return n, stop
}

// pidsMentioning lists live processes whose command line holds s (every
// process a node starts names a path under its directory, and every shim
// its containerd's socket), by name.
func pidsMentioning(t *testing.T, s string) map[int]string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), s) || isZombie(pid) {
			continue
		}
		out[pid] = filepath.Base(strings.Split(string(b), "\x00")[0])
	}
	return out
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z"
}

// inNetNS lists the processes in the network namespace with inode ino.
func inNetNS(ino uint64) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Ino == ino && !isZombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder lists mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// dirEntries lists dir's entries by name (none if dir is missing).
func dirEntries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// shimSockets lists the live sockets of the node's shims. containerd puts
// them in /run/containerd/s, outside the node's directory, named by
// sha256("<containerd socket>/<namespace>/<container ID>") of the container
// each shim was started for (a pod's sandbox).
func shimSockets(ctx context.Context, t *testing.T, n *cluster.Node) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, n.Ctr, "--address", n.ContainerdSocket, "--namespace", "k8s.io", "containers", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("ctr containers ls: %v", err)
	}
	var socks []string
	for _, id := range strings.Fields(string(out)) {
		sum := sha256.Sum256([]byte(filepath.Join(n.ContainerdSocket, "k8s.io", id)))
		if p := filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])); exists(p) {
			socks = append(socks, p)
		}
	}
	return socks
}
