package hostfs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// loop runs f in a goroutine until the returned stop is called; stop waits
// for it and returns how often f ran and the first error it returned.
func loop(f func() error) (stop func() (int, error)) {
	var (
		done  atomic.Bool
		wg    sync.WaitGroup
		runs  int
		first error
	)
	wg.Go(func() {
		for !done.Load() {
			runs++
			if err := f(); err != nil && first == nil {
				first = err
			}
		}
	})
	return func() (int, error) {
		done.Store(true)
		wg.Wait()
		return runs, first
	}
}

func TestConcurrentReadersSeeWholeFiles(t *testing.T) {
	d := newDir(t)
	a := bytes.Repeat([]byte("a"), 1<<20)
	b := bytes.Repeat([]byte("bb"), 1<<20)
	if _, err := d.WriteFile("big", a, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d.Path(), "big")
	stop := loop(func() error {
		got, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			return fmt.Errorf("read %d bytes that are neither content", len(got))
		}
		return nil
	})
	for i := range 200 {
		next := b
		if i%2 == 1 {
			next = a
		}
		if changed, err := d.WriteFile("big", next, 0o644); err != nil || !changed {
			t.Fatalf("write %d: changed=%v err=%v", i, changed, err)
		}
	}
	reads, err := stop()
	if err != nil {
		t.Fatalf("a reader saw a partial file: %v", err)
	}
	t.Logf("%d reads during 200 writes", reads)
}

// TestExecWhileReplacing copies an executable over and over while another
// goroutine of this process execs it: no exec may fail, in particular with
// ETXTBSY from a writable descriptor inherited by a concurrent fork.
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
	stop := loop(func() error {
		if err := exec.Command(target).Run(); err != nil {
			return fmt.Errorf("exec %s: %w", target, err)
		}
		return nil
	})
	for i := range 200 {
		if changed, err := d.CopyFile("plugin", srcs[(i+1)%2], 0o755); err != nil || !changed {
			t.Fatalf("copy %d: changed=%v err=%v", i, changed, err)
		}
	}
	execs, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d execs during 200 copies", execs)
	noTempFiles(t, d)
}
