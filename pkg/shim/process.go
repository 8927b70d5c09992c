package shim

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

// Process is the running process's Env. A runtime may leave stdin or
// stdout non-blocking: os.Stdin and os.Stdout wait on them in Go's poller.
func Process() Env {
	return Env{
		Getenv: os.Getenv, Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Exe: executable(), Args: os.Args, Procs: runtime.GOMAXPROCS(0), Exec: Exec,
		HandOff: func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error) {
			return handoff.Send(socket, req, netnsFD, handoff.Budget)
		},
	}
}

// executable is the shim's path: /proc/self/exe, else its argv[0] when
// absolute (runtimes exec a plugin by its full path), else "" and
// fullPath looks on CNI_PATH.
func executable() string {
	if p, err := os.Executable(); err == nil && filepath.IsAbs(p) {
		return p
	}
	if len(os.Args) > 0 && filepath.IsAbs(os.Args[0]) {
		return os.Args[0]
	}
	return ""
}

// Exec is Env.Exec on the real process: stdin, when given, becomes fd 0
// through a memory file, since the runtime's pipe was read to the end.
func Exec(path string, argv, envv []string, stdin []byte) error {
	if stdin != nil {
		if err := stdinFrom(stdin); err != nil {
			return fmt.Errorf("passing stdin on: %w", err)
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
	f := os.NewFile(uintptr(fd), "istio-cni-stdin")
	defer func() { _ = f.Close() }()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return unix.Dup3(fd, 0, 0)
}
