package shim

import (
	"io"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// The process's side, without os, reads what os reads.
func TestProcessSideIsOs(t *testing.T) {
	t.Setenv("SHIM_TEST_VAR", "a=b")
	if got := Getenv("SHIM_TEST_VAR"); got != os.Getenv("SHIM_TEST_VAR") {
		t.Errorf("Getenv %q, os.Getenv %q", got, os.Getenv("SHIM_TEST_VAR"))
	}
	if want, err := os.Executable(); err != nil || Exe() != want {
		t.Errorf("Exe %q, os.Executable %q (%v)", Exe(), want, err)
	}
	if got := Args(); !slices.Equal(got, os.Args) {
		t.Errorf("Args %q, os.Args %q", got, os.Args)
	}
	if memfdCreate() != unix.SYS_MEMFD_CREATE {
		t.Errorf("memfd_create is %d here, x/sys/unix says %d", memfdCreate(), unix.SYS_MEMFD_CREATE)
	}
}

// FD reads to io.EOF and writes everything, through a pipe smaller than
// what is written.
func TestFDThroughAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i)
	}
	done := make(chan error, 1)
	go func() {
		_, err := FD(w.Fd()).Write(want)
		_ = w.Close()
		done <- err
	}()
	got, err := io.ReadAll(FD(r.Fd()))
	if err != nil || string(got) != string(want) {
		t.Errorf("read %d bytes (%v), want %d", len(got), err, len(want))
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// A runtime may leave the pipes non-blocking: FD waits on them as os
// did, instead of failing with EAGAIN. Writing: the pipe is filled first,
// so the write must wait; reading: the pipe is empty when the read may
// begin.
func TestFDWaitsOnANonBlockingPipe(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	r, w := p[0], p[1]
	defer unix.Close(r)
	defer unix.Close(w)
	full := 0
	for {
		n, err := unix.Write(w, make([]byte, 4096))
		if err != nil {
			break // EAGAIN: full
		}
		full += n
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := FD(w).Write([]byte("after the full pipe"))
		wrote <- err
	}()
	got := make([]byte, 0, full+64)
	buf := make([]byte, 64<<10)
	for len(got) < full+len("after the full pipe") {
		n, err := FD(r).Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if err := <-wrote; err != nil || string(got[full:]) != "after the full pipe" {
		t.Errorf("write into a full non-blocking pipe: %v; its tail read %q", err, got[full:])
	}

	read := make(chan string, 1)
	go func() {
		n, err := FD(r).Read(buf)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(buf[:n])
	}()
	if _, err := unix.Write(w, []byte("late")); err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != "late" {
		t.Errorf("read from an empty non-blocking pipe: %q, want late", got)
	}
}
