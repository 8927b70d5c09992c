package shim

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary run with SHIM_TEST_MAIN set is the shim's main, for
// the tests of the real process's side.
func TestMain(m *testing.M) {
	if os.Getenv("SHIM_TEST_MAIN") != "" {
		os.Exit(Run(Process()))
	}
	os.Exit(m.Run())
}

// A runtime may leave stdin or stdout non-blocking: the shim waits on
// them instead of failing with EAGAIN. Stdout: the pipe is full when the
// shim writes VERSION's answer. Stdin: the pipe is empty when the shim
// reads an ADD's config, which it passes whole to the full plugin (here
// cat, beside a copy of the shim).
func TestShimWaitsOnNonBlockingPipes(t *testing.T) {
	shim := shimBinary(t, "#!/bin/sh\nexec cat\n")
	t.Run("stdout", func(t *testing.T) {
		r, w := nonBlockingPipe(t)
		full := 0
		for {
			n, err := unix.Write(int(w.Fd()), make([]byte, 4096))
			if err != nil {
				break // EAGAIN: full
			}
			full += n
		}
		cmd := shimCmd(t, shim, "VERSION")
		cmd.Stdout = w
		done := start(t, cmd, w)
		waitUntilPolling(t, cmd.Process.Pid, done)
		got, err := io.ReadAll(r) // to the end: the shim exited
		if want := append(make([]byte, full), VersionInfo...); err != nil || !bytes.Equal(got, want) {
			t.Errorf("read %d bytes ending %q (%v), want %d zeros then %q", len(got), got[max(0, len(got)-len(VersionInfo)):], err, full, VersionInfo)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		addOnEmptyStdin(t, shimCmd(t, shim, "ADD"))()
	})
}

// addOnEmptyStdin starts the shim's ADD on an empty non-blocking pipe and
// waits until it polls it; feed then writes the config and checks that
// the full plugin (cat) read it whole.
func addOnEmptyStdin(t *testing.T, cmd *exec.Cmd) (feed func()) {
	t.Helper()
	r, w := nonBlockingPipe(t)
	cmd.Stdin = r
	var out bytes.Buffer
	cmd.Stdout = &out
	done := start(t, cmd, r)
	waitUntilPolling(t, cmd.Process.Pid, done)
	return func() {
		t.Helper()
		const config = `{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni"}`
		if _, err := w.WriteString(config); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if err := <-done; err != nil || out.String() != config {
			t.Errorf("the full plugin read %q (%v), want %q", out.String(), err, config)
		}
	}
}

// shimBinary is a copy of the test binary, run as the shim, with full as
// the full plugin beside it.
func shimBinary(t *testing.T, full string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "istio-cni"), b, 0o755); err != nil { // #nosec G306 -- a test's executable
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FullBinary), []byte(full), 0o755); err != nil { // #nosec G306 -- a test's executable
		t.Fatal(err)
	}
	return filepath.Join(dir, "istio-cni")
}

func shimCmd(t *testing.T, shim, verb string) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), shim)
	cmd.Env = append(os.Environ(), "SHIM_TEST_MAIN=1", "CNI_COMMAND="+verb, "CNI_PATH="+filepath.Dir(shim))
	return cmd
}

func nonBlockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
	return r, w
}

// start starts cmd, whose end of the pipe is f, and closes the test's
// copy of f; f is still non-blocking, so the shim's is too.
func start(t *testing.T, cmd *exec.Cmd, f *os.File) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("the shim's pipe is blocking (flags %#x, %v)", flags, err)
	}
	_ = f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return done
}

// waitUntilPolling waits until a thread of pid sleeps in ppoll, which the
// shim calls only while it waits on its stdin or stdout.
func waitUntilPolling(t *testing.T, pid int, done <-chan error) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the shim exited (%v) instead of waiting on its pipe", err)
		default:
		}
		files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if nr, _, _ := strings.Cut(string(b), " "); nr == strconv.Itoa(unix.SYS_PPOLL) {
				return
			}
		}
	}
	t.Fatal("the shim never waited on its pipe")
}

// The real process passes its arguments on to the full plugin exactly,
// read from /proc: empty ones and ones with spaces included.
func TestShimPassesItsArgumentsOn(t *testing.T) {
	shim := shimBinary(t, "#!/bin/sh\nprintf '<%s>' \"$@\"\n")
	cmd := exec.CommandContext(t.Context(), shim, "a", "", "b c")
	cmd.Env = append(os.Environ(), "SHIM_TEST_MAIN=1", "CNI_COMMAND=DEL", "CNI_PATH="+filepath.Dir(shim))
	out, err := cmd.Output()
	if want := "<a><><b c>"; err != nil || string(out) != want {
		t.Errorf("the full plugin got %q (%v), want %q", out, err, want)
	}
}

// An upgrade replaces the shim's file while a shim runs (/proc/self/exe
// then ends in " (deleted)"): the shim still finds the full plugin beside
// its path. The shim waits on its stdin while the file is replaced.
func TestShimReplacedWhileRunningFindsTheFullPlugin(t *testing.T) {
	shim := shimBinary(t, "#!/bin/sh\nexec cat\n")
	cmd := shimCmd(t, shim, "ADD")
	cmd.Env = append(cmd.Env, "CNI_PATH=/nonexistent") // only /proc/self/exe leads to it
	feed := addOnEmptyStdin(t, cmd)
	b, err := os.ReadFile(shim)
	if err != nil {
		t.Fatal(err)
	}
	next := shim + ".next"
	if err := os.WriteFile(next, b, 0o755); err != nil { // #nosec G306 -- a test's executable
		t.Fatal(err)
	}
	if err := os.Rename(next, shim); err != nil {
		t.Fatal(err)
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"); err != nil || !strings.HasSuffix(exe, " (deleted)") {
		t.Fatalf("the running shim's exe is %q (%v), want it deleted", exe, err)
	}
	feed()
}
