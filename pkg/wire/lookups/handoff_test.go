package lookups

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

// devNullFD is a descriptor for the shim to send: /dev/null, open until
// the test and its servers are done.
func devNullFD(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return int(f.Fd())
}

// serveAdds serves lookups and hand-offs, add running each hand-off.
func serveAdds(t *testing.T, add func(handoff.Request, int) (handoff.Response, func())) string {
	t.Helper()
	path, _ := serveAddsUntil(t, add)
	return path
}

// serveAddsUntil is serveAdds, with a stop that returns once every
// connection is answered.
func serveAddsUntil(t *testing.T, add func(handoff.Request, int) (handoff.Response, func())) (string, func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pods.sock")
	s, err := Listen(path, func(string, string) (*kube.Pod, bool) { return nil, false }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.Add = add
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return path, stop
}

func inode(t *testing.T, fd int) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// The shim's request reaches the agent whole, with the descriptor of the
// very file it opened (a big stdin included); the answer comes back
// whole, and what runs after it runs after the shim has it.
func TestHandOffRoundTrip(t *testing.T) {
	file, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	want := inode(t, int(file.Fd()))
	got := make(chan handoff.Request, 1)
	sameFile := make(chan bool, 1)
	answered := make(chan struct{})
	afterRan := make(chan bool, 1)
	path := serveAdds(t, func(req handoff.Request, fd int) (handoff.Response, func()) {
		got <- req
		sameFile <- inode(t, fd) == want
		return handoff.Response{Done: true, Stdout: []byte("result"), Stderr: []byte("log")}, func() {
			select {
			case <-answered:
				afterRan <- true
			case <-time.After(10 * time.Second):
				afterRan <- false
			}
		}
	})
	stdin := append([]byte(`{"name":"k8s","pad":"`), bytes.Repeat([]byte("x"), 200<<10)...)
	stdin = append(stdin, `"}`...)
	req := handoff.Request{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0", Args: "K=V", Stdin: stdin, Netlink: []string{"ipv4"}, Release: "1.8.9"}
	resp, err := handoff.Send(path, req, int(file.Fd()), 5*time.Second)
	close(answered)
	if err != nil || !resp.Done || string(resp.Stdout) != "result" || string(resp.Stderr) != "log" {
		t.Fatalf("Send = %+v, %v; want the agent's answer", resp, err)
	}
	r := <-got
	if r.ContainerID != "c1" || r.Netns != req.Netns || !bytes.Equal(r.Stdin, stdin) || r.Deadline == 0 || len(r.Netlink) != 1 || r.Netlink[0] != "ipv4" || r.Release != "1.8.9" {
		t.Errorf("the agent got %q, netlink %v as iptables %q (stdin %d bytes), want the request (%d bytes)", r.ContainerID, r.Netlink, r.Release, len(r.Stdin), len(stdin))
	}
	if !<-sameFile {
		t.Error("the agent's descriptor is not the file the shim opened")
	}
	if !<-afterRan {
		t.Error("after ran before the shim had the answer")
	}
}

// Every way the agent does not take the ADD is an answer the shim acts on
// at once (it runs the plugin), never a hang past the budget.
func TestHandOffRefusals(t *testing.T) {
	fd := devNullFD(t)
	req := handoff.Request{ContainerID: "c1", Stdin: []byte(`{}`)}

	handedBack := serveAdds(t, func(handoff.Request, int) (handoff.Response, func()) {
		return handoff.Response{HandBack: "the agent does not hold the pod"}, nil
	})
	if resp, err := handoff.Send(handedBack, req, fd, 5*time.Second); err != nil || resp.Done || resp.HandBack != "the agent does not hold the pod" {
		t.Errorf("handed back: %+v, %v", resp, err)
	}
	noAdds := serveAdds(t, nil)
	if resp, err := handoff.Send(noAdds, req, fd, 5*time.Second); err != nil || resp.Done || resp.HandBack == "" {
		t.Errorf("an agent without Add: %+v, %v; want a hand-back", resp, err)
	}
	// An agent from before this version reads the frame as a lookup it
	// cannot decode and closes without an answer; one that reads
	// another version's frame answers in its own.
	old := fakeAgent(t, func(c net.Conn) {
		line := make([]byte, maxRequest)
		_, _ = c.Read(line)
	})
	if _, err := handoff.Send(old, req, fd, 5*time.Second); !errors.Is(err, handoff.ErrNotTaken) {
		t.Errorf("an older agent: %v, want ErrNotTaken", err)
	}
	other := fakeAgent(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 64<<10))
		b, _ := handoff.Response{Done: true}.MarshalBinary()
		b[len(handoff.Magic)+1] = handoff.Version + 1 // the version's low byte
		_, _ = c.Write(b)
	})
	var verr *handoff.VersionError
	if _, err := handoff.Send(other, req, fd, 5*time.Second); !errors.As(err, &verr) || verr.Got != handoff.Version+1 {
		t.Errorf("an agent of another version: %v, want its VersionError", err)
	}
	// This agent answers a frame of a version it does not read, a newer
	// shim's or one older than every version it reads, with a hand-back.
	for _, v := range []int{handoff.Version + 1, 1} {
		b, _ := req.MarshalBinary()
		b[len(handoff.Magic)+1] = byte(v)
		c, err := net.Dial("unix", handedBack)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(b)
		_ = c.(*net.UnixConn).CloseWrite()
		got, _ := io.ReadAll(c)
		_ = c.Close()
		var resp handoff.Response
		if err := resp.UnmarshalBinary(got); err != nil || resp.Done || !strings.Contains(resp.HandBack, fmt.Sprintf("version %d, not %d", v, handoff.Version)) {
			t.Errorf("a frame of version %d: %+v, %v; want a hand-back naming the versions", v, resp, err)
		}
	}
	if _, err := handoff.Send(filepath.Join(t.TempDir(), "none.sock"), req, fd, 5*time.Second); err == nil {
		t.Error("no agent: no error")
	}
	// A wedged agent: it accepts and never answers.
	wedged := fakeAgent(t, func(net.Conn) { <-t.Context().Done() })
	_, err := handoff.Send(wedged, req, fd, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("a wedged agent: %v, want no answer within the budget", err)
	}
	if _, err := handoff.Send(handedBack, handoff.Request{Stdin: bytes.Repeat([]byte("x"), handoff.MaxRequest)}, fd, time.Second); err == nil {
		t.Error("a request over MaxRequest was sent")
	}
	// An agent that trickles its answer a byte at a time still runs out
	// the whole exchange's budget, not each read's.
	trickle := fakeAgent(t, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		_, _ = c.Read(buf)
		answer, _ := handoff.Response{Done: true, Stdout: []byte("result")}.MarshalBinary()
		for _, b := range answer {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-t.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	if resp, err := handoff.Send(trickle, req, fd, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("a trickling agent: %+v, %v; want no answer within the budget", resp, err)
	}
}

// An answer many reads long (a big result, the plugin's log) reaches the
// shim whole; one over MaxResponse is refused, never cut to a result.
func TestHandOffLongAnswer(t *testing.T) {
	fd := devNullFD(t)
	req := handoff.Request{ContainerID: "c1", Stdin: []byte(`{}`)}
	stdout := bytes.Repeat([]byte(`{"ips":[]}`), 30<<10)
	stderr := bytes.Repeat([]byte("log line\n"), 20<<10)
	long := serveAdds(t, func(handoff.Request, int) (handoff.Response, func()) {
		return handoff.Response{Done: true, Stdout: stdout, Stderr: stderr}, nil
	})
	resp, err := handoff.Send(long, req, fd, 5*time.Second)
	if err != nil || !resp.Done || !bytes.Equal(resp.Stdout, stdout) || !bytes.Equal(resp.Stderr, stderr) {
		t.Errorf("a %d-byte result and a %d-byte log: done %v, %d and %d bytes, %v; want both whole", len(stdout), len(stderr), resp.Done, len(resp.Stdout), len(resp.Stderr), err)
	}
	// The longest answer the agent may write arrives whole.
	empty, _ := handoff.Response{Done: true}.MarshalBinary()
	longest := handoff.Response{Done: true, Stdout: bytes.Repeat([]byte("r"), handoff.MaxResponse-len(empty))}
	if b, err := longest.MarshalBinary(); err != nil || len(b) != handoff.MaxResponse {
		t.Fatalf("the longest answer is %d bytes (%v), want %d", len(b), err, handoff.MaxResponse)
	}
	atMost := serveAdds(t, func(handoff.Request, int) (handoff.Response, func()) { return longest, nil })
	if resp, err := handoff.Send(atMost, req, fd, 5*time.Second); err != nil || !bytes.Equal(resp.Stdout, longest.Stdout) {
		t.Errorf("a %d-byte answer: %d bytes of result, %v; want it whole", handoff.MaxResponse, len(resp.Stdout), err)
	}
	over := fmt.Sprintf("over %d bytes", handoff.MaxResponse)
	for _, size := range []int{handoff.MaxResponse + 1, 2 * handoff.MaxResponse} {
		agent := fakeAgent(t, func(c net.Conn) {
			_, _ = c.Read(make([]byte, 64<<10))
			answer, _ := handoff.Response{Done: true, Stdout: []byte("result")}.MarshalBinary()
			_, _ = c.Write(append(answer, make([]byte, size-len(answer))...))
		})
		if resp, err := handoff.Send(agent, req, fd, 5*time.Second); err == nil || !strings.Contains(err.Error(), over) {
			t.Errorf("a %d-byte answer: %+v, %v; want it refused as %s", size, resp.Done, err, over)
		}
	}
}

// The agent is told when the shim stops waiting, and what waits for the
// answer (the report) does not run when the shim is gone.
func TestHandOffShimGone(t *testing.T) {
	fd := devNullFD(t)
	release := make(chan struct{})
	got := make(chan handoff.Request, 1)
	afterRan := make(chan struct{}, 1)
	path, stop := serveAddsUntil(t, func(req handoff.Request, _ int) (handoff.Response, func()) {
		got <- req
		<-release // the shim gives up meanwhile
		return handoff.Response{Done: true}, func() { afterRan <- struct{}{} }
	})
	before := time.Now()
	_, err := handoff.Send(path, handoff.Request{Stdin: []byte(`{}`)}, fd, 200*time.Millisecond)
	if err == nil {
		t.Fatal("Send succeeded while the agent held its answer")
	}
	req := <-got
	if d := time.Unix(0, req.Deadline); d.Before(before) || d.After(before.Add(time.Second)) {
		t.Errorf("deadline %v, want the shim's, 200 ms after %v", d, before)
	}
	// The shim's socket is closed: the answer cannot be written.
	close(release)
	stop()
	select {
	case <-afterRan:
		t.Error("after ran though the shim never got the answer")
	default:
	}
}

// fakeAgent serves each connection at a new socket with serve.
func fakeAgent(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return path
}

// A frame whose first read brings less than its Magic is still a frame:
// the shim sends it in one call, but a stream may split it anywhere.
func TestHandOffSplitFrame(t *testing.T) {
	fd := devNullFD(t)
	path := serveAdds(t, func(handoff.Request, int) (handoff.Response, func()) {
		return handoff.Response{Done: true, Stdout: []byte("result")}, nil
	})
	frame, err := handoff.Request{ContainerID: "c1", Stdin: []byte("{\n}"), Deadline: 1}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 3} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		uc := c.(*net.UnixConn)
		if _, _, err := uc.WriteMsgUnix(frame[:cut], syscall.UnixRights(fd), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := uc.Write(frame[cut:]); err != nil {
			t.Fatal(err)
		}
		_ = uc.CloseWrite()
		got, _ := io.ReadAll(uc)
		_ = uc.Close()
		var resp handoff.Response
		if err := resp.UnmarshalBinary(got); err != nil || !resp.Done {
			t.Errorf("first read of %d bytes: %+v, %v; want the agent's Done", cut, resp, err)
		}
	}
}
