package cluster

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A restarted process runs the same command line, and in a detached
// cluster takes its predecessor's line in the PID file: StopRecorded stops
// it, in its predecessor's turn.
func TestRestartRecorded(t *testing.T) {
	dir := t.TempDir()
	l := newLauncher(filepath.Join(dir, PIDFileName))
	defer l.close()
	start := func(name string) *proc {
		p, err := startProc(l, name, "/bin/sleep", []string{"300"}, filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.stop(time.Second) })
		return p
	}
	first, second := start("first"), start("second")
	if _, err := l.restart(first); err == nil {
		t.Fatal("restart of a running process succeeded")
	}
	if err := first.stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	again, err := l.restart(first)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.stop(time.Second) })
	if !slices.Equal(again.cmd.Args, first.cmd.Args) || again.log != first.log {
		t.Errorf("restarted as %q logging to %s, want %q logging to %s", again.cmd.Args, again.log, first.cmd.Args, first.log)
	}

	procs, err := readRecorded(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []recorded
	for _, r := range procs {
		got = append(got, recorded{name: r.name, pid: r.pid})
	}
	want := []recorded{{name: "first", pid: again.pid()}, {name: "second", pid: second.pid()}}
	if !slices.Equal(got, want) {
		t.Fatalf("PID file after the restart: %+v, want %+v", got, want)
	}
	if err := StopRecorded(dir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{again, second} {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) still runs after StopRecorded", p.name, p.pid())
		}
	}
}
