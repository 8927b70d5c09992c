package reports

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/poll"
)

// running is a Listener with Run going; reports arrive on ch.
type running struct {
	l   *Listener
	ch  chan Report
	out chan error // Run's result
}

// start listens at path (checking it every few milliseconds) and runs the
// listener until the test ends.
func start(t *testing.T, path string) *running {
	t.Helper()
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	l.interval = 5 * time.Millisecond
	r := &running{l: l, ch: make(chan Report, 100), out: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.out <- l.Run(ctx, func(rep Report) { r.ch <- rep }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.out; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = l.Close()
	})
	return r
}

// next waits for a report; the limit only turns a hang into a failure.
func (r *running) next(t *testing.T) Report {
	t.Helper()
	select {
	case rep := <-r.ch:
		return rep
	case <-time.After(30 * time.Second):
		t.Fatal("no report")
	}
	return Report{}
}

func sockPath(t testing.TB) string { return filepath.Join(t.TempDir(), "reports.sock") }

func TestRoundTrip(t *testing.T) {
	path := sockPath(t)
	r := start(t, path)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file: %v, %v", fi.Mode(), err)
	}
	want := sample()
	want.Error = "pod team-a/web-1: iptables-restore: exit status 1"
	if err := Send(path, want); err != nil {
		t.Fatal(err)
	}
	got := r.next(t)
	if !got.Time.Equal(want.Time) || got.V != Version {
		t.Errorf("time %v, v %d", got.Time, got.V)
	}
	got.Time, want.V = want.Time, Version
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if s := r.l.Stats(); s.Reports != 1 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestListenReplacesStaleSocketOnly(t *testing.T) {
	path := sockPath(t)
	staleSocket(t, path)
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	if err := Send(path, sample()); err != nil {
		t.Errorf("Send: %v", err)
	}
	_ = l.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close left the socket file: %v", err)
	}

	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Errorf("the file was replaced")
	}
	if _, err := Listen(filepath.Join(t.TempDir(), "missing", "reports.sock")); err == nil {
		t.Error("Listen in a missing directory: no error")
	}
}

// staleSocket leaves a socket file at path with nobody behind it, as an
// agent that was killed does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // a datagram socket's file stays
}

func TestSendNoAgent(t *testing.T) {
	missing := sockPath(t)
	stale := sockPath(t)
	staleSocket(t, stale)
	for name, path := range map[string]string{
		"no file":      missing,
		"no listener":  stale,
		"no directory": "/nonexistent/reports.sock",
		"not a socket": t.TempDir(), // the kernel answers ECONNREFUSED
	} {
		if err := Send(path, sample()); !errors.Is(err, ErrNoAgent) {
			t.Errorf("%s: err = %v, want ErrNoAgent", name, err)
		}
	}
}

// TestSendFullQueue: with an agent that never reads, the queue fills and
// Send gives up (a deadline error, not ErrNoAgent) instead of blocking.
func TestSendFullQueue(t *testing.T) {
	path := sockPath(t)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		for range 100000 {
			if err := Send(path, sample()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrNoAgent) {
			t.Errorf("Send to a full queue: err = %v, want a deadline error", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Send blocked on a full queue")
	}
	// The agent catches up: the queued reports are intact.
	r := make(chan Report, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = l.Run(ctx, func(rep Report) { r <- rep; cancel() }) }()
	if rep := <-r; rep.Pod != "team-a/web-1" {
		t.Errorf("queued report %+v", rep)
	}
}

func TestRunRecreatesRemovedSocket(t *testing.T) {
	path := sockPath(t)
	r := start(t, path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	poll.UntilTrue(t, 30*time.Second, "Send succeeds after the socket file was removed", func() bool { return Send(path, sample()) == nil })
	if rep := r.next(t); rep.Verb != "ADD" {
		t.Errorf("report %+v", rep)
	}
	if s := r.l.Stats(); s.Recreated == 0 || s.RecreateError != nil {
		t.Errorf("stats %+v", s)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("re-created socket: %v, %v", fi, err)
	}
}

// TestRunRecreatesReplacedSocket: a dead socket put at the path (a
// restored backup, another process's leftover) is replaced too.
func TestRunRecreatesReplacedSocket(t *testing.T) {
	path := sockPath(t)
	r := start(t, path)
	other := filepath.Join(filepath.Dir(path), "other.sock")
	staleSocket(t, other)
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	poll.UntilTrue(t, 30*time.Second, "Send succeeds after the socket file was replaced", func() bool { return Send(path, sample()) == nil })
	r.next(t)
}

// TestNewerListenerWins: a second agent listening at the path (an update
// overlapping the old pod) keeps it; the first neither takes it back nor,
// on Close, removes it.
func TestNewerListenerWins(t *testing.T) {
	path := sockPath(t)
	older := start(t, path)
	newer := start(t, path)
	poll.UntilTrue(t, 30*time.Second, "the older listener notices", func() bool { return older.l.Stats().Superseded })
	if err := Send(path, sample()); err != nil {
		t.Fatal(err)
	}
	newer.next(t)
	if err := older.l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Send(path, sample()); err != nil {
		t.Errorf("after the older listener closed: %v", err)
	}
	newer.next(t)
	if s := older.l.Stats(); s.Reports != 0 || s.Recreated != 0 {
		t.Errorf("older listener stats %+v", s)
	}
}

func TestRunDropsMalformed(t *testing.T) {
	path := sockPath(t)
	r := start(t, path)
	c, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	huge := `{"v":1,"verb":"ADD","error":"` + strings.Repeat("x", MaxDatagram) + `"}`
	for _, d := range []string{"not json", `{"verb":"ADD"}`, "", huge} {
		if _, err := c.Write([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := Send(path, sample()); err != nil {
		t.Fatal(err)
	}
	if rep := r.next(t); rep.Pod != "team-a/web-1" {
		t.Errorf("report %+v", rep)
	}
	if s := r.l.Stats(); s.Malformed != 4 || s.Reports != 1 || s.LastMalformed == nil {
		t.Errorf("stats %+v, want 4 malformed and 1 report", s)
	}
}

func TestSendTruncatedEventArrives(t *testing.T) {
	path := sockPath(t)
	r := start(t, path)
	rep := sample()
	rep.Error = strings.Repeat("iptables-restore: line 1 failed\n", 1000)
	if err := Send(path, rep); err != nil {
		t.Fatal(err)
	}
	if got := r.next(t); !strings.HasSuffix(got.Error, cutMark) || got.Pod != rep.Pod {
		t.Errorf("report %+v", got)
	}
}

func TestRunReturnsOnClose(t *testing.T) {
	l, err := Listen(sockPath(t))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() { out <- l.Run(context.Background(), func(Report) {}) }()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-out; err != nil {
		t.Errorf("Run after Close: %v", err)
	}
}
