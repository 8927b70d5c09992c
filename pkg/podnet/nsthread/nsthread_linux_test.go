package nsthread

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/test/poll"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

// newNetns is a fresh network namespace, open, and its inode.
func newNetns(t testing.TB) (fd int, ino uint64) {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	var st unix.Stat_t
	if err := unix.Fstat(int(n.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return int(n.Fd()), st.Ino
}

func threadNS() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		return 0
	}
	return st.Ino
}

// abroad lists the process's threads in another network namespace than
// its own, but the main thread TestMain parked abroad.
func abroad(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	mainThread := fmt.Sprintf("/proc/self/task/%d/ns/net", os.Getpid())
	var out []string
	for _, task := range tasks {
		var st unix.Stat_t
		if task != mainThread && unix.Stat(task, &st) == nil && st.Ino != home.ino {
			ns, _ := os.Readlink(task)
			out = append(out, task+" in "+ns)
		}
	}
	return out
}

// panicAbroad moves its thread into a namespace of its own and panics
// there: a bug in a Run's function at its worst.
func panicAbroad() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		panic(err)
	}
	panic("a bug in fn")
}

// atHome reports whether the calling thread is in the process's own
// network namespace.
func atHome() bool {
	var st unix.Stat_t
	return home.err == nil && unix.Stat("/proc/thread-self/ns/net", &st) == nil && st.Ino == home.ino
}

// handedOutAbroad locks n goroutines to the threads the scheduler hands
// them at once and lists the namespaces of those not home.
func handedOutAbroad(n int) []string {
	out := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if !atHome() {
				ns, _ := os.Readlink("/proc/thread-self/ns/net")
				out <- ns
			}
		})
	}
	wg.Wait()
	close(out)
	var abroad []string
	for ns := range out {
		abroad = append(abroad, ns)
	}
	return abroad
}

// panickedOnMain is what a Run that panicked in a namespace of its own
// returned. TestMain ran it while the main goroutine waited, so most
// likely on the main thread, which Go then parks in that namespace
// instead of ending it: the tests' check of every thread leaves it out.
var panickedOnMain error

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		panickedOnMain = Run(panicAbroad)
	}
	os.Exit(m.Run())
}

// In runs fn in the namespace, from many goroutines at once, and every
// thread of the process is back home after.
func TestInLeavesEveryThreadHome(t *testing.T) {
	requireRoot(t)
	fd, ino := newNetns(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				var in uint64
				if err := In(fd, func() error { in = threadNS(); return nil }); err != nil || in != ino {
					t.Errorf("In: ran in %d, want %d: %v", in, ino, err)
				}
			}
		})
	}
	wg.Wait()
	for _, a := range abroad(t) {
		t.Errorf("%s, not the process's namespace", a)
	}
}

// A thread that made it home is reused: sequential Ins run on a handful
// of threads, not one new thread each.
func TestInReusesItsThreads(t *testing.T) {
	requireRoot(t)
	fd, _ := newNetns(t)
	tids := map[int]bool{}
	for range 100 {
		if err := In(fd, func() error { tids[unix.Gettid()] = true; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if limit := runtime.GOMAXPROCS(0) + 4; len(tids) > limit {
		t.Errorf("100 Ins ran on %d threads, want at most %d", len(tids), limit)
	}
}

// fn's error is In's; a namespace that cannot be entered runs nothing.
func TestInErrors(t *testing.T) {
	requireRoot(t)
	fd, _ := newNetns(t)
	want := errors.New("fn's own")
	if err := In(fd, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("got %v, want fn's error", err)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := false
	if err := In(int(f.Fd()), func() error { ran = true; return nil }); err == nil || ran {
		t.Errorf("a file that is no namespace: err %v, ran %v", err, ran)
	}
}

// A Run that panics in a namespace of its own leaves its thread there,
// locked, to end (or, the main thread, to be parked); the Runs after it
// still return their threads home, not to wherever the main thread was
// left. Fresh threads the scheduler hands out afterwards are all at home.
func TestPanicsLeaveNoThreadAbroad(t *testing.T) {
	requireRoot(t)
	if panickedOnMain == nil || !strings.Contains(panickedOnMain.Error(), "a bug in fn") {
		t.Fatalf("the main thread's Run: %v", panickedOnMain)
	}
	fd, ino := newNetns(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				err := Run(panicAbroad)
				if err == nil || !strings.Contains(err.Error(), "a bug in fn") {
					t.Errorf("a panicking Run: %v", err)
				}
				var in uint64
				if err := In(fd, func() error { in = threadNS(); return nil }); err != nil || in != ino {
					t.Errorf("In after a panic: ran in %d, want %d: %v", in, ino, err)
				}
			}
		})
	}
	wg.Wait()
	for _, ns := range handedOutAbroad(40) {
		t.Errorf("a thread the scheduler handed out is in %s, not the process's namespace", ns)
	}
	// A panicked thread ends just after its Run has returned (CI saw
	// one still listed, once): wait for them all to end.
	poll.Until(t, 10*time.Second, "the panicked threads ending", func() (bool, string) {
		left := abroad(t)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// Threads that panicked abroad are never handed out again, with nothing
// between the panics and the threads the scheduler hands out next.
func TestPanickedThreadsAreNotHandedOut(t *testing.T) {
	requireRoot(t)
	for range 20 {
		if err := Run(panicAbroad); err == nil {
			t.Fatal("a panicking Run returned no error")
		}
	}
	for _, ns := range handedOutAbroad(50) {
		t.Errorf("a thread the scheduler handed out is in %s", ns)
	}
}

// fn ending its goroutine (t.FailNow does) is an error, not a Run that
// never returns; the thread, wherever fn left it, ends.
func TestGoexitIsAnError(t *testing.T) {
	requireRoot(t)
	done := make(chan error, 1)
	go func() {
		done <- Run(func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return err
			}
			runtime.Goexit()
			return nil
		})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "ended its goroutine") {
			t.Errorf("got %v, want an error saying fn ended its goroutine", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after fn's Goexit")
	}
	// The thread ends just after Run has its answer.
	poll.Until(t, 10*time.Second, "the Goexit's thread ending", func() (bool, string) {
		left := abroad(t)
		return len(left) == 0, fmt.Sprint(left)
	})
}

// BenchmarkIn is one entry into a pod's namespace and back.
func BenchmarkIn(b *testing.B) {
	requireRoot(b)
	fd, _ := newNetns(b)
	for b.Loop() {
		if err := In(fd, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// A home descriptor whose number another namespace took (a stray close
// elsewhere, then a pod's namespace opened) takes the thread there, and
// setns succeeds: the thread must end, not be handed out abroad.
func TestHomeDescriptorTakenThreadEnds(t *testing.T) {
	requireRoot(t)
	fd, ino := newNetns(t)
	saved := home
	home.fd = fd // what the stray close and the next open would leave
	for range 20 {
		if err := Run(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	home = saved
	for _, ns := range handedOutAbroad(50) {
		t.Errorf("a thread the scheduler handed out is in %s (the taken descriptor's namespace is %d)", ns, ino)
	}
	poll.Until(t, 10*time.Second, "the threads that went to the taken descriptor's namespace ending", func() (bool, string) {
		left := abroad(t)
		return len(left) == 0, fmt.Sprint(left)
	})
}
