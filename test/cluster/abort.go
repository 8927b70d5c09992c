package cluster

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// AbortBudget is what the fast teardown may take, whatever the node holds
// (a full node's 110 pods included): the harness reserves it before `go
// test`'s timeout, and a signal handler must finish well within it.
const AbortBudget = time.Minute

// Abort tears the node down at once, without the CRI or CNI DEL: for a
// run that must end now (a signal, `go test`'s timeout near). In order:
// kubelet, so nothing restarts a container; what tests registered with
// AtAbort, last first; every container process, by
// the node's shims and cgroups; the other components; then what they
// left on the host (abortHost). It is safe beside a Stop already under
// way and takes seconds with a hundred pods, where Stop's CRI removal of
// each sandbox takes minutes.
func (n *Node) Abort() error {
	n.abortOnce.Do(func() {
		kill := func(p *proc) {
			if p != nil && !p.exited() {
				_ = p.cmd.Process.Kill() // through a pidfd: never a recycled PID
			}
		}
		kill(n.component("kubelet"))
		n.undoMu.Lock()
		undo := slices.Clone(n.undo)
		n.undoMu.Unlock()
		done := slowStep("the tests' AtAbort functions")
		for _, f := range slices.Backward(undo) {
			f()
		}
		done()
		n.abortErr = abortNode(n.dir, n.bridge, func() {
			for _, p := range slices.Backward(n.components) {
				kill(p)
			}
			// A fleet's node shares the API server: Fleet.Abort ends it.
			if n.APIServer != nil && !n.joined {
				n.mu.Lock()
				kill(n.apiserv)
				n.mu.Unlock()
				kill(n.etcd)
			}
		})
		unregister(n.bridge)
		if n.abortErr == nil {
			done := slowStep("pruning the node's directory")
			n.abortErr = PruneToLogs(n.dir)
			done()
		}
	})
	return n.abortErr
}

// PruneToLogs removes what a stopped node's directory holds besides its
// logs (the components' *.log and kubelet's pod logs): the images and
// container snapshots, etcd's data, the node's host directories. A failed
// run keeps its logs in a few megabytes, not hundreds. It refuses while
// anything is mounted below dir.
func PruneToLogs(dir string) error {
	if points, err := mountPoints(dir); err != nil || len(points) > 0 {
		return errors.Join(err, fmt.Errorf("not pruning %s: still mounted: %v", dir, points))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case !e.IsDir() && filepath.Ext(e.Name()) == ".log":
		case e.Name() == "kubelet":
			errs = append(errs, pruneExcept(path, "pod-logs", "config.yaml"))
		default:
			errs = append(errs, os.RemoveAll(path))
		}
	}
	return errors.Join(errs...)
}

// pruneExcept removes dir's entries but the named ones.
func pruneExcept(dir string, keep ...string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// abortNode is the fast teardown of the node in dir, for a live one
// (Abort) as for one a killed run left (its registry entry): stopRest ends
// the node's own processes once no container runs, nil when they are gone
// or recorded in dir's PID file.
func abortNode(dir, bridge string, stopRest func()) error {
	socket := containerdSocket(dir)
	cgroupRoot := cgroupRootName(bridge)
	recorded, _ := readRecorded(dir)
	for _, r := range recorded {
		if r.name == "kubelet" {
			_ = r.kill()
		}
	}
	// Before the shims die: their bundles name the sockets they keep
	// outside the node's directory.
	socks := shimSockets(dir)
	done := slowStep("killing the containers")
	errs := []error{killContainers(socket, cgroupRoot)}
	done()
	done = slowStep("stopping the node's processes")
	if stopRest != nil {
		stopRest()
	}
	for _, r := range slices.Backward(recorded) {
		errs = append(errs, r.kill())
	}
	done()
	// containerd may have started a shim before it died.
	done = slowStep("killing the containers a second time")
	errs = append(errs, killContainers(socket, cgroupRoot))
	done()
	// Bundles do not go with the shims: listed again for any shim
	// containerd started after the first list.
	for _, s := range union(socks, shimSockets(dir)) {
		errs = append(errs, removeIfExists(s))
	}
	done = slowStep("cleaning the host")
	errs = append(errs, cleanHost(dir, bridge))
	done()
	return errors.Join(errs...)
}

// slowStep times one step of the fast teardown; the returned function
// says on stderr if it took long, so a teardown over its budget shows
// where the time went.
func slowStep(what string) (done func()) {
	start := time.Now()
	return func() {
		if took := time.Since(start); took > 2*time.Second {
			fmt.Fprintf(os.Stderr, "cluster: abort: %s took %v\n", what, took.Round(time.Millisecond))
		}
	}
}

// cleanHost removes what a node leaves on the host once none of its
// processes runs: its shims' sockets, every mount under its directory (rootfs, shm, kubelet's
// volumes, the pods' network namespaces with it, which frees their veths),
// its bridge, its cgroup root, and kubelet's host chains when no other
// kubelet runs.
func cleanHost(dir, bridge string) error {
	var errs []error
	// Shims whose sandboxes the CRI could not remove were SIGKILLed:
	// nothing removed their sockets.
	errs = append(errs, removeShimSockets(dir))
	errs = append(errs, unmountUnder(dir))
	// The namespaces' mount points, now plain files.
	errs = append(errs, emptyDir(netnsDir(dir)))
	errs = append(errs, deleteBridge(bridge))
	errs = append(errs, removeCgroupRoot(cgroupRootName(bridge)))
	removeKubeletChains()
	return errors.Join(errs...)
}

// kill SIGKILLs the recorded process if its PID still names it, and
// waits for it to go. os.FindProcess holds a pidfd, so once the start time
// matches, the signal cannot hit a successor.
func (r recorded) kill() error {
	proc, err := os.FindProcess(r.pid)
	if err != nil {
		return nil // gone
	}
	defer func() { _ = proc.Release() }()
	if !r.alive() {
		return nil
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s (pid %d): %w", r.name, r.pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.alive() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// AbortOnSignal arms abort for a test binary that runs a node: on SIGINT
// or SIGTERM, and AbortBudget before deadline (`go test -timeout` panics
// then, and a panic runs no deferred call, while containerd's shims and
// their containers outlive the process by design), it runs abort and exits
// 1. deadline is TestDeadline() in a TestMain, t.Deadline() in a test;
// zero for none. It returns a function that disarms it (once or more).
func AbortOnSignal(abort func() error, deadline time.Time) (disarm func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var expire <-chan time.Time
	if at, ok := abortAt(deadline, time.Now()); ok {
		expire = time.After(time.Until(at))
	}
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "cluster: %v: tearing the node down\n", s)
		case <-expire:
			fmt.Fprintln(os.Stderr, "cluster: the test timeout is near: tearing the node down")
		case <-done:
			return
		}
		start := time.Now()
		if err := abort(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: tearing the node down:", err)
		}
		fmt.Fprintf(os.Stderr, "cluster: node torn down in %v\n", time.Since(start).Round(time.Millisecond))
		os.Exit(1)
	}()
	return sync.OnceFunc(func() {
		signal.Stop(sigs)
		close(done)
	})
}

// abortAt is when to tear down before deadline: AbortBudget ahead of it,
// if the run has at least that long again before (a shorter run would be
// cut short by the teardown's own reserve).
func abortAt(deadline, now time.Time) (time.Time, bool) {
	if deadline.IsZero() || deadline.Sub(now) <= 2*AbortBudget {
		return time.Time{}, false
	}
	return deadline.Add(-AbortBudget), true
}

// TestDeadline is when `go test -timeout` will panic, for a TestMain, which
// runs before the testing package parses its flags: it parses them (as
// m.Run would) and counts from now, which is before m.Run starts go
// test's own alarm, so it is never later than that. Zero without a timeout.
func TestDeadline() time.Time {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return time.Time{}
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil || d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

func containerdSocket(dir string) string { return filepath.Join(dir, "containerd", "containerd.sock") }

// abortState is Abort's once, and what tests asked it to undo first.
type abortState struct {
	abortOnce sync.Once
	abortErr  error
	undoMu    sync.Mutex
	undo      []func()
}

// AtAbort registers f to run, right after kubelet is stopped, when the run
// is aborted (a signal, go test's timeout): for what a test made outside
// the node's directory (a bind mount at a platform's path), which its
// t.Cleanup would have undone. f must be safe to run after that cleanup,
// and quick.
func (n *Node) AtAbort(f func()) {
	n.undoMu.Lock()
	defer n.undoMu.Unlock()
	n.undo = append(n.undo, f)
}
