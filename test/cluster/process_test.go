package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	waitfor "istio-cni.local/istio-cni/test/poll"
)

// A SIGKILLed process is waited for until it is gone, however long its exit
// takes on a loaded machine (a cold run's kubelet took over 10 s, and the
// reboot that stopped it gave up with the node half down). The slow exit
// is made real: the process sits in a frozen cgroup, where SIGKILL stays
// pending until it is thawed, 12 s later.
func TestStopWaitsOutASlowExit(t *testing.T) {
	freezer := "/sys/fs/cgroup/freezer"
	if _, err := os.Stat(filepath.Join(freezer, "cgroup.procs")); err != nil {
		t.Skip("no cgroup v1 freezer (cgroup v2's lets SIGKILL through)")
	}
	// A run killed while its child was frozen left it so, its SIGKILL
	// pending: thaw (the kill lands) and remove what it left.
	stale, _ := filepath.Glob(filepath.Join(freezer, "istio-cni-test-slow-exit-*"))
	for _, cg := range stale {
		_ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644)
		_ = waitfor.Wait(time.Minute, "a stale frozen cgroup emptied", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			return err != nil || strings.TrimSpace(string(b)) == "", string(b)
		})
		_ = os.Remove(cg)
	}
	cg := filepath.Join(freezer, fmt.Sprintf("istio-cni-test-slow-exit-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skipf("cannot make a freezer cgroup: %v", err)
	}
	state := filepath.Join(cg, "freezer.state")
	thaw := func() { _ = os.WriteFile(state, []byte("THAWED"), 0o644) }

	dir := t.TempDir()
	l := newLauncher("")
	defer l.close()
	p, err := startProc(l, "slow", "/bin/sleep", []string{"300"}, filepath.Join(dir, "slow.log"))
	if err != nil {
		_ = os.Remove(cg)
		t.Fatal(err)
	}
	// One cleanup, in this order on every path: thaw, kill, wait, remove.
	defer func() {
		thaw()
		_ = p.cmd.Process.Kill()
		if err := waitfor.Wait(time.Minute, "the slow process gone", func() (bool, string) { return p.exited(), "" }); err != nil {
			t.Error(err)
		}
		_ = os.Remove(cg)
	}()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitfor.UntilTrue(t, 10*time.Second, "the process frozen", func() bool {
		b, err := os.ReadFile(state)
		return err == nil && strings.TrimSpace(string(b)) == "FROZEN"
	})

	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- p.stop(100 * time.Millisecond) }()
	thawAt := time.NewTimer(12 * time.Second)
	defer thawAt.Stop()
	select {
	case err := <-stopped:
		t.Fatalf("stop returned while the process could not exit yet (after %v): %v", time.Since(start).Round(time.Millisecond), err)
	case <-thawAt.C:
	}
	thaw()
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !p.exited() {
		t.Fatal("stop returned nil with the process still running")
	}
}
