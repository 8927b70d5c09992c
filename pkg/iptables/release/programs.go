package release

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// fallbackDirs are searched after PATH: container runtimes may exec plugins
// with a PATH that lacks the sbin directories where iptables lives (and
// even the bin directories, where util-linux's nsenter lives).
var fallbackDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"}

// LookPath finds a program in PATH as exec.LookPath does (a name with a
// slash is itself; the search ends, refused, at a match in a relative
// directory), or else in fallbackDirs, which exec.LookPath does
// not search; the shim links no os/exec.
func LookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if executable(name) {
			return name, nil
		}
		return "", errors.New(name + " is not an executable file")
	}
	if env, _ := syscall.Getenv("PATH"); env != "" {
		for _, dir := range strings.Split(env, ":") {
			if dir == "" {
				dir = "."
			}
			if p := path.Join(dir, name); executable(p) {
				if !path.IsAbs(p) {
					break // exec.LookPath's ErrDot
				}
				return p, nil
			}
		}
	}
	for _, dir := range fallbackDirs {
		if p := path.Join(dir, name); executable(p) {
			return p, nil
		}
	}
	return "", errors.New(name + " not found in PATH or " + strings.Join(fallbackDirs, ", "))
}

// executable is exec.LookPath's test: a file, not a directory, that this
// process may execute, as the kernel says (a noexec mount, or another
// user's mode bits, is a no); the mode bits only where the kernel cannot
// say (ENOSYS, or EPERM from a seccomp filter).
func executable(p string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil || st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return false
	}
	const atFDCWD, xOK, atEAccess = -100, 1, 0x200 // <fcntl.h>, <unistd.h>: the same on every Linux
	err := syscall.Faccessat(atFDCWD, p, xOK, atEAccess)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
		return st.Mode&0o111 != 0
	}
	return err == nil
}

// At is the backend of the program at p, through its symlinks
// (backendAt).
func At(p string) (Backend, error) {
	real, err := realPath(p)
	if err != nil {
		return "", &resolveError{p, err}
	}
	return backendAt(p, real), nil
}

// realPath is the file p leads to, every symlink followed, as the kernel
// resolves it when it opens p: the path /proc gives its descriptor. The
// shim asks on every legacy node's ADD, and links no os (the cost of
// path/filepath's EvalSymlinks at every pod start, BENCHMARKS.md).
func realPath(p string) (string, error) {
	fd, err := syscall.Open(p, unix.O_PATH|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer func() { _ = syscall.Close(fd) }()
	buf := make([]byte, 4096)
	n, err := syscall.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	switch {
	case err != nil:
		// Not the program's error: a missing /proc is not a missing file.
		return "", errors.New("reading its path in /proc/self/fd: " + err.Error())
	case n == len(buf) || !path.IsAbs(string(buf[:n])):
		return "", errors.New("/proc/self/fd names no path for it")
	}
	return string(buf[:n]), nil
}

// resolveError is At's error: the program's path and why it did not
// resolve.
type resolveError struct {
	path string
	err  error
}

func (e *resolveError) Error() string { return "resolving " + e.path + ": " + e.err.Error() }
func (e *resolveError) Unwrap() error { return e.err }

// backendAt is the backend of the program at p, which leads to real: its
// names say (xtables-nft-multi, iptables-legacy-restore, ...), else a link
// to a name with nft in it; else legacy (iptables before 1.8).
func backendAt(p, real string) Backend {
	for _, name := range []string{path.Base(p), path.Base(real)} {
		switch {
		case strings.Contains(name, "nft"):
			return NFT
		case strings.Contains(name, "legacy"):
			return Legacy
		}
	}
	buf := make([]byte, 4096)
	if n, err := syscall.Readlink(p, buf); err == nil && strings.Contains(string(buf[:n]), "nft") {
		return NFT
	}
	return Legacy
}
