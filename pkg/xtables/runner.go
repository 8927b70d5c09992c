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
	cmd := exec.CommandContext(ctx, path, args...)
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
