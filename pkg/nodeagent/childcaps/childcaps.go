// Package childcaps limits the capabilities of every program the node agent
// starts. The agent runs as root, and a root process that execs gives its
// child every capability in its bounding set, so the iptables it runs in a
// pod's network namespace would hold CAP_SYS_ADMIN too, which only the
// agent itself needs (for setns). Dropping the rest from the bounding set
// leaves the agent's own capabilities as they are and gives children only
// the ones kept.
package childcaps

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Limit drops every capability but keep from the bounding set of all the
// process's threads (the set is per thread, and Go may exec from any).
// Dropping needs CAP_SETPCAP, which goes last unless kept; a bounding set
// already within keep needs nothing.
func Limit(keep ...uintptr) error {
	kept := map[uintptr]bool{}
	for _, c := range keep {
		kept[c] = true
	}
	var drop []uintptr
	setpcap := false
	for c := uintptr(0); c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("reading the bounding set: %w", err)
		}
		switch {
		case in == 0 || kept[c]:
		case c == unix.CAP_SETPCAP:
			setpcap = true // dropping it first would forbid the other drops
		default:
			drop = append(drop, c)
		}
	}
	if setpcap {
		drop = append(drop, unix.CAP_SETPCAP)
	}
	for _, c := range drop {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); errno != 0 {
			return fmt.Errorf("dropping capability %d from the bounding set: %w (needs CAP_SETPCAP)", c, errno)
		}
	}
	return nil
}
