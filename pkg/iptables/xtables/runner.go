// Package xtables programs and reads the rule model in the current network
// namespace with the node's iptables-restore and iptables-save. It is the only
// package that runs iptables; callers enter the pod's namespace first.
package xtables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Runner runs a command: the seam between the rule logic and the OS, so tests
// can record what would run.
type Runner interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands for real, on the calling OS thread's namespaces.
type ExecRunner struct{}

// Run executes name (found with release.LookPath) with args, feeding stdin; the
// error carries stderr.
func (ExecRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	path, err := release.LookPath(name)
	if err != nil {
		return nil, err
	}
	return run(exec.CommandContext(ctx, path, args...), name, stdin)
}

// MaxOutput bounds what a program may print: a pod's ruleset is a few
// kilobytes, and a pod with NET_ADMIN controls how much iptables-save
// prints of its namespace, so more is refused rather than read.
const MaxOutput = 4 << 20

// maxStderr keeps an error message readable.
const maxStderr = 4 << 10

func run(cmd *exec.Cmd, name string, stdin []byte) ([]byte, error) {
	// A cancelled iptables may leave a child (modprobe) holding the pipes;
	// do not wait for it past this.
	cmd.WaitDelay = time.Second
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	stdout, stderr := &capped{max: MaxOutput}, &capped{max: maxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if stdout.over {
		return nil, fmt.Errorf("%s: printed more than %d MiB (an oversized ruleset in this namespace); not read", name, MaxOutput>>20)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.b.String())
		if msg == "" {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return stdout.b.Bytes(), nil
}

// capped keeps at most max bytes and notes that more came; it never
// fails a write, so the program runs to its end (or its context's).
type capped struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := c.max - c.b.Len(); room < n {
		c.over = true
		p = p[:max(room, 0)]
	}
	c.b.Write(p)
	return n, nil // all of it, kept or not: a short write would stop the copy and stall the program
}
