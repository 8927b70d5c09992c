package podnet

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ownUserNS identifies the user namespace this process runs in, read once
// (threads cannot leave it: Go cannot setns into a user namespace).
var ownUserNS, ownUserNSErr = statUserNS("/proc/self/ns/user")

type nsID struct{ dev, ino uint64 }

func statUserNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, fmt.Errorf("the process's own user namespace: %w", err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

// foreignOwner opens the user namespace that owns the network namespace
// open at fd when it is not this process's own (a pod with hostUsers:
// false), or returns nil. A kernel too old to say (before 4.9) has no
// user namespaces for pods either.
func foreignOwner(fd int) (*os.File, error) {
	ufd, err := unix.IoctlRetInt(fd, unix.NS_GET_USERNS)
	switch {
	case errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL):
		return nil, nil
	case err != nil:
		// EPERM: the owner is outside this process's user namespace.
		return nil, fmt.Errorf("%w: finding the user namespace that owns it: %w", ErrOpenNetns, err)
	}
	f := os.NewFile(uintptr(ufd), "user namespace")
	if ownUserNSErr != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %w", ErrOpenNetns, ownUserNSErr)
	}
	var st unix.Stat_t
	if err := unix.Fstat(ufd, &st); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: the user namespace that owns it: %w", ErrOpenNetns, err)
	}
	if (nsID{st.Dev, st.Ino}) == ownUserNS {
		_ = f.Close()
		return nil, nil
	}
	return f, nil
}
