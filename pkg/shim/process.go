package shim

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"syscall"
	"unsafe"
)

// The real process's side of Env, with plain system calls: the shim links
// no os (nor time, which os imports), since what a Go program links costs
// its start, used or not (BENCHMARKS.md, "The shim's start").

// FD reads and writes a descriptor of the process (0, 1, 2).
type FD int

// Read reads once, again after a signal, and waits on a descriptor the
// runtime left non-blocking (os would wait in Go's poller); io.EOF at the
// end.
func (f FD) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			if err := wait(int(f), pollIn); err != nil {
				return 0, err
			}
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of b.
func (f FD) Write(b []byte) (int, error) {
	if err := writeAll(int(f), b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// writeAll writes all of b to fd, waiting on one left non-blocking.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN): // a non-blocking stdout
			if err := wait(fd, pollOut); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Getenv is os.Getenv.
func Getenv(key string) string {
	v, _ := syscall.Getenv(key)
	return v
}

// Exe is the running binary's path, as os.Executable reads it on Linux.
func Exe() string {
	buf := make([]byte, 4096)
	n, err := syscall.Readlink("/proc/self/exe", buf)
	if err != nil || n == len(buf) {
		return ""
	}
	return string(buf[:n])
}

// Args is the process's arguments (os.Args), read from the kernel.
func Args() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = syscall.Close(fd) }()
	b, err := readAll(FD(fd))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// memfdCreate is memfd_create's number, which package syscall lacks on
// some architectures (x/sys/unix has it, but links time). A switch, not
// a map: a map would be built at every start.
func memfdCreate() uintptr {
	switch runtime.GOARCH {
	case "amd64":
		return 319
	case "386":
		return 356
	case "arm":
		return 385
	case "arm64", "riscv64", "loong64":
		return 279
	case "ppc64", "ppc64le":
		return 360
	case "s390x":
		return 350
	case "mips", "mipsle":
		return 4354
	case "mips64", "mips64le":
		return 5314
	}
	return 0
}

// memfd is a new memory file (memfd_create), close-on-exec.
func memfd(name string) (int, error) {
	nr := memfdCreate()
	if nr == 0 {
		return -1, errors.New("memfd_create's number is unknown on " + runtime.GOARCH)
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	const mfdCloexec = 1
	fd, _, errno := syscall.Syscall(nr, uintptr(unsafe.Pointer(p)), mfdCloexec, 0) // #nosec G103 -- the name, a C string the call only reads
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

const (
	pollIn  = 0x1 // <poll.h>, the same on every Linux
	pollOut = 0x4
)

// wait blocks until fd is ready for events, or hung up (the read or
// write that follows then says so).
func wait(fd int, events int16) error {
	p := struct {
		fd              int32
		events, revents int16
	}{int32(fd), events, 0} // #nosec G115 -- a descriptor
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, 0, 0, 0, 0) // #nosec G103 -- the kernel reads and writes p
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		}
		return errno
	}
}
