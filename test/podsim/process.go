package podsim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command runs name in a namespace as uid and gid uid (0: root), with
// nsenter as a person would.
func Command(netns string, uid int, name string, args ...string) *exec.Cmd {
	a := []string{"--net=" + netns}
	if uid != 0 {
		a = append(a, "--setuid="+strconv.Itoa(uid), "--setgid="+strconv.Itoa(uid))
	}
	return exec.Command("nsenter", append(append(a, name), args...)...)
}

// Process is a long-running program in a sandbox (the test proxy).
type Process struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logs    bytes.Buffer
}

// Start runs testproxy with args in a namespace as uid and waits, up to
// 10s, for its ready file. readyDir must be writable by uid.
func Start(netns string, uid int, testproxy, readyDir string, args ...string) (*Process, error) {
	dir, err := os.MkdirTemp(readyDir, "ready-")
	if err == nil {
		err = os.Chmod(dir, 0o777) // the proxy runs as another uid
	}
	if err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "ready")
	p := &Process{cmd: Command(netns, uid, testproxy, append(args, "--ready-file", ready)...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("testproxy %v exited: %w\n%s", args, p.waitErr, p.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("testproxy %v not ready after 10s\n%s", args, errors.Join(p.Stop(), fmt.Errorf("%s", p.logs.String())))
		}
	}
}

// Stop ends the process it started, by PID: SIGTERM, then SIGKILL after 5s.
func (p *Process) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return nil
}

// Connect opens a TCP connection from a namespace as uid with the test
// proxy's client and returns the line the other end wrote.
func Connect(netns string, uid int, testproxy, addr string) (string, error) {
	out, err := Command(netns, uid, testproxy, "client", "--addr", addr, "--timeout", "5s").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("connecting to %s from %s as uid %d: %w\n%s", addr, netns, uid, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// PluginCommand runs a CNI plugin binary the way a runtime does: the CNI_*
// environment and the network config on stdin. An empty netns leaves
// CNI_NETNS unset.
func PluginCommand(bin, command, netns, cniArgs string, stdin []byte) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"CNI_COMMAND=" + command, "CNI_CONTAINERID=ctr-exec", "CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(bin), "CNI_ARGS=" + cniArgs, "PATH=" + os.Getenv("PATH"),
	}
	if netns != "" {
		cmd.Env = append(cmd.Env, "CNI_NETNS="+netns)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	return cmd
}
