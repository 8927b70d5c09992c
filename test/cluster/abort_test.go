package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A run killed outright (`go test`'s timeout panics and runs no deferred
// call; a CI job is cancelled) leaves its node's hundred pods running:
// shims, pause and app processes, their network namespaces, mounts,
// bridge and cgroups. The next node start tears it all down first and
// leaves nothing of it. How long that took is logged, as a benchmark
// figure against cluster.AbortBudget, not asserted.
func TestKilledRunIsTornDownByTheNext(t *testing.T) {
	dir, bridge := t.TempDir(), "icnikilled0"
	child, facts := startChildNode(t, "killed", dir, bridge, "10.90.0.0/24", 100)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	// What the killed run left: the scenario, not a vacuous pass.
	if left := leftOf(t, dir, bridge, facts); len(left.procs) < 200 || left.netns < 100 {
		t.Fatalf("after the kill: %d processes and %d network namespaces left, want the node's 100 pods' (%s)", len(left.procs), left.netns, left)
	}
	start := time.Now()
	if _, err := cluster.SweepStale(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the next run's sweep tore down a killed run's node with 100 pods in %v (budget %v)",
		time.Since(start).Round(time.Millisecond), cluster.AbortBudget)
	requireNothingOf(t, dir, bridge, facts)
	if exists(dir) {
		t.Errorf("the killed run's directory %s is still there", dir)
	}
}

// A run that gets SIGTERM, or nears `go test`'s timeout (the same path),
// tears its node down and exits 1: nothing of it is left. How long that
// took is logged, as a benchmark figure against cluster.AbortBudget, not
// asserted.
func TestAbortOnSignal(t *testing.T) {
	dir, bridge := t.TempDir(), "icniabort0"
	child, facts := startChildNode(t, "signal", dir, bridge, "10.89.0.0/24", 10)
	start := time.Now()
	if err := child.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("the aborted run exited with %v, want exit status 1", err)
		}
	case <-time.After(abortHang):
		_ = child.Process.Kill()
		b, _ := os.ReadFile(facts.log)
		t.Fatalf("the aborted run still runs %v after SIGTERM: its teardown hangs; its output ends:\n%s", abortHang, lastLines(string(b), 30))
	}
	t.Logf("SIGTERM to exit, a node with 10 pods torn down: %v (budget %v)",
		time.Since(start).Round(time.Millisecond), cluster.AbortBudget)
	requireNothingOf(t, dir, bridge, facts)
}

// abortHang is how long TestAbortOnSignal waits for the aborted child to
// exit: it only turns a teardown that hangs into a failure. How long the
// teardown should take (cluster.AbortBudget) is a benchmark's figure.
const abortHang = 10 * time.Minute

// childFacts is what the child reports of its running node.
type childFacts struct {
	Socket, NetnsDir string
	Veths            []string // the pods' host-side links
	log              string   // the child's output, for a failure's message
}

const childEnv = "CLUSTER_TEST_CHILD"

// startChildNode runs this test binary as a child that starts a node in
// dir with pods plain pods running (TestChildNode), and returns once they
// all run.
func startChildNode(t *testing.T, mode, dir, bridge, subnet string, pods int) (*exec.Cmd, childFacts) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cluster: needs root")
	}
	image, err := cluster.BuildTestImage(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	log, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildNode$", "-test.v", "-test.timeout=20m") // #nosec G204 -- this test binary
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{mode, dir, bridge, subnet, strconv.Itoa(pods), image, ready}, ","))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Should the test fail before its teardown, the sweep still ends
		// the node.
		_ = cmd.Process.Kill()
		_, _ = cluster.SweepStale()
	})
	var facts childFacts
	err = poll.Wait(10*time.Minute, "the child's node and its pods", func() (bool, string) {
		if isZombie(cmd.Process.Pid) { // exited (not reaped yet) or gone
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("the child exited early:\n%s", b)
		}
		b, err := os.ReadFile(ready) // #nosec G304 -- our temp file
		return err == nil && json.Unmarshal(b, &facts) == nil, "not ready"
	})
	facts.log = log.Name()
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		t.Fatalf("%v\n%s", err, b)
	}
	return cmd, facts
}

// TestChildNode is startChildNode's child; it does nothing in a normal run.
func TestChildNode(t *testing.T) {
	args := strings.Split(os.Getenv(childEnv), ",")
	if len(args) != 7 {
		t.Skip("only run as a child of the abort tests")
	}
	mode, dir, bridge, subnet, image, ready := args[0], args[1], args[2], args[3], args[5], args[6]
	pods, _ := strconv.Atoi(args[4])
	ctx := context.Background()
	n, err := cluster.StartNode(ctx, cluster.NodeOptions{Dir: dir, Bridge: bridge, Subnet: netip.MustParsePrefix(subnet)})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "signal" {
		deadline, _ := t.Deadline()
		cluster.AbortOnSignal(n.Abort, deadline)
	}
	if err := n.ImportImages(ctx, image); err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		if err := n.CreatePod(ctx, cluster.PodSpec{Namespace: "default", Name: fmt.Sprintf("p-%d", i), Server: true}.JSON()); err != nil {
			t.Fatal(err)
		}
	}
	if err := poll.Wait(8*time.Minute, "every pod running", func() (bool, string) {
		running, err := runningPods(ctx, n)
		return err == nil && running == pods, fmt.Sprint(running, " running ", err)
	}); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "-o", "link", "show", "master", bridge).Output()
	facts := childFacts{Socket: n.ContainerdSocket, NetnsDir: n.NetnsDir}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 1 {
			facts.Veths = append(facts.Veths, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	b, _ := json.Marshal(facts)
	if err := os.WriteFile(ready, b, 0o600); err != nil {
		t.Fatal(err)
	}
	select {} // until killed or signalled
}

func runningPods(ctx context.Context, n *cluster.Node) (int, error) {
	status, body, err := n.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/pods", nil)
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("list pods: %d %v", status, err)
	}
	var list struct{ Items []cluster.Pod }
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, err
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase == "Running" {
			running++
		}
	}
	return running, nil
}

// left is what a node left on the machine.
type left struct {
	procs  []int    // in its cgroups, or its shims
	netns  int      // namespaces bound in its netns directory
	mounts []string // under its directory
	links  []string // its bridge and the pods' veths
	files  []string // its registry entry
}

func (l left) String() string {
	return fmt.Sprintf("%d processes %v, %d network namespaces, mounts %v, links %v, files %v", len(l.procs), l.procs, l.netns, l.mounts, l.links, l.files)
}

func (l left) empty() bool {
	return len(l.procs) == 0 && l.netns == 0 && len(l.mounts) == 0 && len(l.links) == 0 && len(l.files) == 0
}

func leftOf(t *testing.T, dir, bridge string, f childFacts) left {
	t.Helper()
	var l left
	for pid := range pidsMentioning(t, f.Socket) {
		l.procs = append(l.procs, pid)
	}
	l.procs = append(l.procs, cgroupProcs(bridge)...)
	l.netns = len(dirEntries(f.NetnsDir))
	l.mounts = mountsUnder(t, dir)
	for _, name := range append([]string{bridge}, f.Veths...) {
		if linkExists(name) {
			l.links = append(l.links, name)
		}
	}
	if p := filepath.Join(cluster.RegistryDir, bridge+".json"); exists(p) {
		l.files = append(l.files, p)
	}
	return l
}

func requireNothingOf(t *testing.T, dir, bridge string, f childFacts) {
	t.Helper()
	if l := leftOf(t, dir, bridge, f); !l.empty() {
		t.Errorf("left on the machine: %s", l)
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/*" + bridge + "*", "/sys/fs/cgroup/*" + bridge + "*"} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("cgroups left: %v", left)
		}
	}
}

// cgroupProcs lists the processes in the node's cgroups (named after its
// bridge), on every hierarchy.
func cgroupProcs(bridge string) []int {
	seen := map[int]bool{}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/istio-cni-" + bridge)
	if v2, _ := filepath.Glob("/sys/fs/cgroup/istio-cni-" + bridge); len(v2) > 0 {
		roots = append(roots, v2...)
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path) // #nosec G304 -- cgroupfs
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !isZombie(pid) {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	var out []int
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
