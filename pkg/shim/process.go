package shim

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

// Process is the running process's Env, read with plain system calls:
// the shim links no os package, whose start (and fmt's, and
// encoding/json's) every pod start would pay (BENCHMARKS.md).
func Process() Env {
	return Env{
		Getenv:  func(k string) string { v, _ := syscall.Getenv(k); return v },
		Environ: syscall.Environ(), Stdin: fdFile(0), Stdout: fdFile(1), Stderr: fdFile(2),
		Exe: executable(), Args: args, Procs: runtime.GOMAXPROCS(0), Exec: Exec,
		HandOff: func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error) {
			return handoff.Send(socket, req, netnsFD, handoff.Budget)
		},
	}
}

// executable is the shim's path, as os.Executable reads it: /proc's link,
// less the " (deleted)" the kernel adds once an upgrade has replaced the
// file. "" when /proc has none: fullPath then looks on CNI_PATH.
func executable() string {
	buf := make([]byte, 4096)
	n, err := syscall.Readlink("/proc/self/exe", buf)
	if err != nil || n == len(buf) {
		return ""
	}
	return strings.TrimSuffix(string(buf[:n]), " (deleted)")
}

// args are the shim's arguments, from /proc: read only to pass them on
// to the full plugin (runtimes pass a plugin none); nil without /proc,
// and the full plugin then gets none either.
func args() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = syscall.Close(fd) }()
	b, err := io.ReadAll(fdFile(fd))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
}

// fdFile reads and writes a descriptor with plain system calls. A
// runtime may leave stdin or stdout non-blocking: the shim then waits in
// ppoll until it is ready, where os.File would wait in Go's poller. A
// write to a closed stdout fails with EPIPE (the shim exits 1), where
// os.File would raise SIGPIPE: the runtime gets a failure either way.
type fdFile int

func (f fdFile) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			if err := f.wait(unix.POLLIN); err != nil {
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

func (f fdFile) Write(b []byte) (int, error) {
	written := 0
	for written < len(b) {
		n, err := syscall.Write(int(f), b[written:])
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			if err := f.wait(unix.POLLOUT); err != nil {
				return written, err
			}
			continue
		case err != nil:
			return written, err
		case n == 0:
			return written, io.ErrShortWrite
		}
		written += n
	}
	return written, nil
}

// wait blocks until the descriptor is ready for events, or has hung up
// (the next read or write then says how).
func (f fdFile) wait(events int16) error {
	for {
		_, err := unix.Ppoll([]unix.PollFd{{Fd: int32(f), Events: events}}, nil, nil) // #nosec G115 -- a descriptor is an int32 to the kernel
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// Exec is Env.Exec on the real process: stdin, when given, becomes fd 0
// through a memory file, since the runtime's pipe was read to the end.
func Exec(path string, argv, envv []string, stdin []byte) error {
	if stdin != nil {
		if err := stdinFrom(stdin); err != nil {
			return wrap("passing stdin on", err)
		}
	}
	return syscall.Exec(path, argv, envv)
}

// stdinFrom makes fd 0 a memory file holding b: no disk, no size limit
// (a pipe holds 64 KiB), and nothing left behind.
func stdinFrom(b []byte) error {
	fd, err := unix.MemfdCreate("istio-cni-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer func() { _ = syscall.Close(fd) }()
	if _, err := fdFile(fd).Write(b); err != nil {
		return err
	}
	if _, err := syscall.Seek(fd, 0, io.SeekStart); err != nil {
		return err
	}
	return unix.Dup3(fd, 0, 0)
}

// wrapped is fmt.Errorf("%s: %w", msg, err), without fmt.
type wrapped struct {
	msg string
	err error
}

func wrap(msg string, err error) error { return &wrapped{msg, err} }

func (w *wrapped) Error() string { return w.msg + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
