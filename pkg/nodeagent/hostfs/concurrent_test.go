package hostfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// How much overlap the tests below require: the writer writes at least
// minWrites times, and on until minOverlapped reads have overlapped a
// write, failing if maxWrites do not get there.
const (
	minWrites     = 200
	minOverlapped = 20
	maxWrites     = 2000
)

// concurrently calls read over and over in a goroutine while it calls
// write(0), write(1), ... in this one, and requires that reads and writes
// overlapped: at least minOverlapped reads ran while a write was in flight
// at some moment. The reader starts before the first write. It fails the
// test on a write's error, and returns the reader's first.
func concurrently(t *testing.T, write func(i int) error, read func() error) (readErr error) {
	t.Helper()
	var (
		begun, ended atomic.Int64 // writes
		during       atomic.Int64 // reads that overlapped a write
		stop         atomic.Bool
		wg           sync.WaitGroup
		reads        int
	)
	running := make(chan struct{})
	wg.Go(func() {
		close(running)
		for !stop.Load() {
			// A write was in flight during the read iff one begun by its
			// end had not ended by its start (the writes are sequential).
			before := ended.Load()
			if err := read(); err != nil && readErr == nil {
				readErr = err
			}
			reads++
			if begun.Load() > before {
				during.Add(1)
			}
		}
	})
	halt := func() { stop.Store(true); wg.Wait() }
	<-running
	writes := 0
	for ; writes < minWrites || during.Load() < minOverlapped && writes < maxWrites; writes++ {
		begun.Add(1)
		err := write(writes)
		ended.Add(1)
		if err != nil {
			halt()
			t.Fatalf("write %d: %v", writes, err)
		}
	}
	halt()
	overlapped := during.Load()
	t.Logf("%d reads during %d writes, %d of them overlapping a write", reads, writes, overlapped)
	if overlapped < minOverlapped {
		t.Fatalf("%d of %d reads overlapped one of %d writes, want at least %d: too few ran concurrently to prove anything", overlapped, reads, writes, minOverlapped)
	}
	return readErr
}

// changedOrErr is a write's error, or one if it changed nothing.
func changedOrErr(changed bool, err error) error {
	if err == nil && !changed {
		return errors.New("the content differs, yet nothing was written")
	}
	return err
}

// Readers of a file rewritten over and over, their reads overlapping the
// writes, see the old or the new content whole, never part of either.
func TestConcurrentReadersSeeWholeFiles(t *testing.T) {
	d := newDir(t)
	a := bytes.Repeat([]byte("a"), 1<<20)
	b := bytes.Repeat([]byte("bb"), 1<<20)
	if _, err := d.WriteFile("big", a, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path(), "big")
	err := concurrently(t, func(i int) error {
		next := b
		if i%2 == 1 {
			next = a
		}
		return changedOrErr(d.WriteFile("big", next, 0o644))
	}, func() error {
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			return fmt.Errorf("read %d bytes that are neither content", len(got))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a reader saw a partial file: %v", err)
	}
}

// TestExecWhileReplacing copies an executable over and over while another
// goroutine of this process execs it, the execs overlapping the copies: no
// exec may fail, in particular with ETXTBSY from a writable descriptor
// inherited by a concurrent fork.
func TestExecWhileReplacing(t *testing.T) {
	d := newDir(t)
	srcDir := t.TempDir()
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to copy: %v", err)
	}
	// Two different executables: trailing bytes do not stop an ELF running.
	srcs := []string{filepath.Join(srcDir, "true1"), filepath.Join(srcDir, "true2")}
	if err := os.WriteFile(srcs[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srcs[1], append(bin, make([]byte, 4096)...), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CopyFile("plugin", srcs[0], 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(d.Path(), "plugin")
	err = concurrently(t, func(i int) error {
		return changedOrErr(d.CopyFile("plugin", srcs[(i+1)%2], 0o755))
	}, func() error {
		if err := exec.Command(target).Run(); err != nil {
			return fmt.Errorf("exec %s: %w", target, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	noTempFiles(t, d)
}
