package handoff

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// The budget bounds the shim's waits on the monotonic clock: the node's
// wall clock stepped back while the agent sits on the request does not
// stretch them. The deadline on the wire stays the wall clock's.
func TestBudgetIgnoresAWallClockStep(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// A wedged agent: it accepts, then reads nothing and answers nothing.
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			held <- c
		}
	}()
	defer func() {
		_ = l.Close()
		select {
		case c := <-held:
			_ = c.Close()
		default:
		}
	}()
	var calls atomic.Int64
	wall := wallNow
	t.Cleanup(func() { wallNow = wall })
	wallNow = func() int64 { return wall() - calls.Add(1)*int64(time.Hour) } // steps back an hour a read

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	done := make(chan error, 1)
	go func() {
		_, err := Send(sock, Request{Stdin: []byte(`{}`)}, int(devNull.Fd()), 200*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a wedged agent answered")
		}
	case <-time.After(time.Minute): // a bound on a hang, not a speed target
		t.Fatal("Send still waits a minute into a 200 ms budget after the wall clock stepped back")
	}
}
