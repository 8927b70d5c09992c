package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// inNetns builds a command that runs in a namespace, as uid/gid (0: root).
func inNetns(path string, uid int, name string, args ...string) *exec.Cmd {
	a := []string{"--net=" + path}
	if uid != 0 {
		a = append(a, "--setuid="+strconv.Itoa(uid), "--setgid="+strconv.Itoa(uid))
	}
	return exec.Command("nsenter", append(append(a, name), args...)...)
}

// runIn runs a command in a namespace with stdin and fails the test on error.
func runIn(t *testing.T, path, stdin, name string, args ...string) string {
	t.Helper()
	cmd := inNetns(path, 0, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, path, err, out)
	}
	return string(out)
}

// startIn starts the test proxy in a namespace (proxy or server role), waits
// for its ready file and stops it, by PID, at cleanup.
func startIn(t *testing.T, path string, uid int, args ...string) {
	t.Helper()
	// Under env.dir (0755), writable by the proxy's uid.
	dir, err := os.MkdirTemp(env.dir, "ready-")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "ready")
	cmd := inNetns(path, uid, filepath.Join(env.binDir, "testproxy"), append(args, "--ready-file", ready)...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("testproxy %v exited: %v\n%s", args, waitErr, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("testproxy %v not ready after 10s\n%s", args, logs.String())
		}
	}
}

// connect opens a TCP connection from a namespace as uid and returns the
// line the other end wrote.
func connect(t *testing.T, path string, uid int, addr string) string {
	t.Helper()
	cmd := inNetns(path, uid, filepath.Join(env.binDir, "testproxy"), "client", "--addr", addr, "--timeout", "5s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("connecting to %s from %s as uid %d: %v\n%s", addr, path, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}
