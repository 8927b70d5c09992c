// Package xtables programs and reads the rule model in the current network
// namespace with the node's iptables-restore and iptables-save. It is the only
// package that runs iptables; callers enter the pod's namespace first.
package xtables

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Runner runs a command: the seam between the rule logic and the OS, so tests
// can record what would run.
type Runner interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands for real, on the calling OS thread's namespaces.
type ExecRunner struct{}

// Run executes name (found with LookPath) with args, feeding stdin; the
// error carries stderr.
func (ExecRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	path, err := LookPath(name)
	if err != nil {
		return nil, err
	}
	return run(exec.CommandContext(ctx, path, args...), name, stdin)
}

func run(cmd *exec.Cmd, name string, stdin []byte) ([]byte, error) {
	// A cancelled iptables may leave a child (modprobe) holding the pipes;
	// do not wait for it past this.
	cmd.WaitDelay = time.Second
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return stdout.Bytes(), nil
}

// RootRunner runs the node's own programs from the node's root filesystem
// mounted at Root, chrooted into it: the agent's image ships no iptables,
// and the node's binaries are the ones whose backend (legacy or nft) and
// lock file match the rules the plugin wrote. The child inherits the
// calling thread's network namespace, as with ExecRunner. Root "" or "/"
// (already the node's root: the agent or inspect run on the node itself)
// runs without chroot.
type RootRunner struct {
	Root string
}

// rootSearchDirs are where a program is looked for inside Root, in the
// order of systemd's default PATH, which the node's runtime (and so the
// plugin) runs with.
var rootSearchDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// Run executes name from Root's sbin and bin directories, chrooted into
// Root, with a clean environment.
func (r RootRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	if r.Root == "" || r.Root == "/" {
		return ExecRunner{}.Run(ctx, stdin, name, args...)
	}
	var path string
	for _, dir := range rootSearchDirs {
		// Lstat: a symlink (Debian's alternatives) resolves only inside
		// the chroot, so its target is not checked here.
		if st, err := os.Lstat(filepath.Join(r.Root, dir, name)); err == nil && (st.Mode()&os.ModeSymlink != 0 || st.Mode().IsRegular() && st.Mode()&0o111 != 0) {
			path = filepath.Join(dir, name)
			break
		}
	}
	if path == "" {
		return nil, fmt.Errorf("%s not found in the node's %v (node root mounted at %s)", name, rootSearchDirs, r.Root)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.Root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	return run(cmd, name, stdin)
}
