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
