package legacy

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked means another writer held the xtables lock past the wait.
var ErrLocked = errors.New("the xtables lock is held")

// polled is called each time the lock was found held (a test's hook).
var polled = func() {}

// lockPath is the lock iptables-legacy takes: XTABLES_LOCKFILE, else
// /run/xtables.lock (the node's, mounted into the agent).
func lockPath() string {
	if p := os.Getenv("XTABLES_LOCKFILE"); p != "" {
		return p
	}
	return "/run/xtables.lock"
}

// lock takes the xtables lock as iptables-legacy does (flock of the file,
// made if absent), waiting until by; iptables' own wait polls each second,
// this one every 100 µs to 1 ms, since the holders (concurrent ADDs among
// them) hold it for about a millisecond.
func lock(by time.Time) (unlock func(), err error) {
	path := lockPath()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the xtables lock %s: %w", path, err)
	}
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("taking the xtables lock %s: %w", path, err)
		}
		if !time.Now().Add(wait).Before(by) {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		polled()
		time.Sleep(wait)
	}
}
