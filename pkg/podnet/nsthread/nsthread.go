// Package nsthread runs code on an OS thread that may enter other network
// namespaces, and hands the thread back to the scheduler only once it is in
// the process's own namespace again: a thread left abroad would give any
// goroutine scheduled on it later sockets in a pod's namespace.
//
// containernetworking's ns.Do does the same, but opens the calling and
// the new thread's namespaces from /proc on every call to know where home
// is: ns.GetNS and Do took 36 µs a call here, In 8 µs (BenchmarkIn), on
// every ADD the node agent runs. Here home is a descriptor opened once.
//
// It sits under podnet, the plugin's one OS step, which it serves; the
// agent's netns finder uses it too.
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// home is the process's own network namespace, opened while the packages
// initialize, on the main thread, before anything can have moved a
// thread. Not /proc/self/ns/net later: that follows the main thread,
// which Go parks, not ends, when a goroutine locked to it exits, in
// whatever namespace it was left.
var home = openHome()

type homeNS struct {
	fd  int
	ino uint64
	err error
}

func openHome() homeNS {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return homeNS{fd: -1, err: fmt.Errorf("opening the process's own network namespace: %w", err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return homeNS{fd: -1, err: fmt.Errorf("the process's own network namespace: %w", err)}
	}
	return homeNS{fd: fd, ino: st.Ino}
}

// HomeInode is the inode of the process's own network namespace.
func HomeInode() (uint64, error) { return home.ino, home.err }

// homeIntact says whether home's descriptor still names the process's own
// namespace: a stray close of its number elsewhere would let the next
// open, a pod's namespace say, take it, and setns "home" go there.
func homeIntact() bool {
	var st unix.Stat_t
	return unix.Fstat(home.fd, &st) == nil && st.Ino == home.ino
}

// Run runs fn on a locked OS thread that fn may move into any network
// namespace (with setns). The thread then returns home and goes back to
// the scheduler; if it cannot, it ends with its goroutine. The setns
// home succeeding, on a descriptor still home's (homeIntact), is the
// kernel's word that the thread is there: no walk of /proc's path
// checks it again (5 µs a call, twice per ADD). A panic in fn,
// or fn ending its goroutine (runtime.Goexit), is an error, not the
// process's end or a caller waiting for good.
func Run(fn func() error) error {
	if home.err != nil {
		return home.err
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, returned := false, false
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic: %v", r)
			} else if !returned {
				errc <- errors.New("the function ended its goroutine")
			}
			if restored {
				runtime.UnlockOSThread()
			}
		}()
		err := fn()
		returned = true
		restored = netns.Set(netns.NsHandle(home.fd)) == nil && homeIntact()
		errc <- err
	}()
	return <-errc
}

// In runs fn on a locked OS thread inside the network namespace open at
// fd (Run); processes fn starts are born there too.
func In(fd int, fn func() error) error {
	return Run(func() error {
		if err := netns.Set(netns.NsHandle(fd)); err != nil {
			return fmt.Errorf("entering the network namespace: %w", err)
		}
		return fn()
	})
}
