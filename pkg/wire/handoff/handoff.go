// Package handoff is how the plugin's shim, the small binary the runtime
// runs as istio-cni, hands an ADD to the node agent: the wire format,
// Send (the shim's side) and Answer (the agent's). The agent answers on
// its pod lookup socket (pkg/wire/lookups' Server passes it the frames),
// where it already holds every pod of the node, so an
// ADD costs the shim's start, one local round trip and the agent's
// nf_tables transaction (one a family) in the pod's namespace, instead of
// the whole plugin's start, a lookup and its own namespace entry.
//
// The agent either runs the ADD to success or hands it back, having
// written nothing but, at most, rules the plugin reconciles; the shim then
// execs the plugin, which does the ADD itself and reads its rules back. So any failure here, an
// older agent that does not know the request included, costs time, never
// a pod's redirect.
package handoff

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// Version is the wire format's newest version (frame.go); a reader takes
// every version from oldestVersion to it and refuses any other. 1 was
// JSON; 2 has no Release (its families are 1.8.9's, v2Release) and no
// Legacy.
const Version = 3

const (
	oldestVersion = 2
	v2Release     = "1.8.9"
)

// EnvHandedBack is set, in the plugin's environment, to why the agent,
// asked to run the ADD, did not finish it: it may have written rules, so
// the plugin reads its own back. EnvNotHandedOff is why the shim did not
// ask. Both go into the plugin's log line.
const (
	EnvHandedBack   = "ISTIO_CNI_HANDED_BACK"
	EnvNotHandedOff = "ISTIO_CNI_NOT_HANDED_OFF"
)

// Budget bounds a hand-off, connecting included: far above an ADD's
// milliseconds on a loaded node, far below the runtime's two-minute
// request timeout, which a hand-back still has to fit in.
const Budget = 2 * time.Second

// Limits: the request carries the runtime's stdin (the entry and the
// primary's prevResult); the response the plugin's result and log line.
const (
	MaxRequest  = 1 << 20
	MaxResponse = 1 << 20
)

// Request is the runtime's call, as the shim received it. The pod's
// network namespace travels beside it as a descriptor (SCM_RIGHTS): the
// agent enters exactly what the runtime named, with no path of the node
// to resolve from its container.
type Request struct {
	ContainerID string
	Netns       string
	IfName      string
	Args        string
	Path        string
	Stdin       []byte
	// Netlink names the families ("ipv4", "ipv6") whose iptables on the
	// node is nf_tables at Release, a release pkg/iptables/nfnl lays
	// rules out as, as the shim found them on the node the way the
	// plugin does. The agent writes no other family: its container's
	// iptables need not be the node's.
	Netlink []string
	Release string
	// Legacy names the families whose iptables on the node is legacy:
	// the agent writes them as x_tables replaces laid out as its own
	// iptables-legacy-restore lays them out, exact on every release (the
	// x_tables ABI does not change). A request names families in Netlink
	// or in Legacy, never both.
	Legacy []string
	// Deadline is when the shim stops waiting (Unix nanoseconds, the
	// node's clock): the agent writes nothing after it, since by then the
	// plugin runs the ADD.
	Deadline int64
}

// Response is the agent's answer. Done: the ADD succeeded, Stdout is the
// CNI result and Stderr the plugin's log line. Otherwise HandBack says why
// the agent did not run it.
type Response struct {
	Done     bool
	HandBack string
	Stdout   []byte
	Stderr   []byte
}

// ErrNotTaken: the agent closed without an answer: one that does not read
// this version's frames (an older agent reads it as a bad lookup).
var ErrNotTaken = errors.New("the agent closed without an answer (an agent of another version?)")

// Send hands req to the agent listening at socket, with the namespace's
// descriptor, within budget. It uses blocking system calls on one thread:
// the shim's whole run is this exchange, and Go's poller would add
// threads and wake-ups to it. Any error means: run the plugin.
func Send(socket string, req Request, netnsFD int, budget time.Duration) (Response, error) {
	// The agent reads the deadline on its wall clock; the shim bounds its
	// own waits on the monotonic one, which a clock step cannot stretch.
	req.Deadline = wallNow() + int64(budget)
	deadline := monoNow() + int64(budget)
	b, err := req.MarshalBinary()
	if err != nil {
		return Response{}, err
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Response{}, wrap("socket", err)
	}
	defer func() { _ = syscall.Close(fd) }()
	if err := retry(fd, syscall.SO_SNDTIMEO, deadline, func() error { return syscall.Connect(fd, &syscall.SockaddrUnix{Name: socket}) }); err != nil && !errors.Is(err, syscall.EISCONN) {
		return Response{}, wrap("connecting to "+socket, err)
	}
	if err := send(fd, b, netnsFD, deadline); err != nil {
		return Response{}, wrap("sending to "+socket, err)
	}
	data, err := readAll(fd, deadline)
	if err != nil {
		return Response{}, wrap("reading from "+socket, err)
	}
	if len(data) == 0 {
		return Response{}, ErrNotTaken
	}
	var resp Response
	if err := resp.UnmarshalBinary(data); err != nil {
		return Response{}, wrap("the agent's answer", err)
	}
	if !resp.Done && resp.HandBack == "" {
		return Response{}, errors.New("the agent's answer: neither done nor handed back")
	}
	return resp, nil
}

// wallNow is the node's clock in Unix nanoseconds, as
// time.Now().UnixNano() reads it on the agent's side; monoNow the
// monotonic clock in nanoseconds. Variables for the tests.
var wallNow, monoNow = func() int64 {
	var tv syscall.Timeval
	_ = syscall.Gettimeofday(&tv)
	return tv.Nano()
}, func() int64 {
	const clockMonotonic = 1 // <time.h>, the same on every Linux
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0) // #nosec G103 -- the kernel writes ts
	return ts.Nano()
}

// send writes b, the descriptor riding with its first byte, then closes
// the writing side: the agent reads to the end.
func send(fd int, b []byte, netnsFD int, deadline int64) error {
	var n int
	if err := retry(fd, syscall.SO_SNDTIMEO, deadline, func() (err error) {
		n, err = syscall.SendmsgN(fd, b, syscall.UnixRights(netnsFD), nil, 0)
		return err
	}); err != nil {
		return err
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		if err := retry(fd, syscall.SO_SNDTIMEO, deadline, func() (err error) {
			n, err = syscall.Write(fd, b)
			return err
		}); err != nil {
			return err
		}
	}
	return syscall.Shutdown(fd, syscall.SHUT_WR)
}

// readAll reads the answer to its end, into a heap buffer sized for a
// usual one (a CNI result and the plugin's log line, about one KiB: one
// read, then the end) that grows for a longer one. A fixed buffer on the
// stack, zeroed at every ADD, grew the shim's stack to 32 KiB
// (BENCHMARKS.md).
func readAll(fd int, deadline int64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(4 << 10)
	if _, err := b.ReadFrom(io.LimitReader(answer{fd, deadline}, MaxResponse+1)); err != nil {
		return nil, err
	}
	if b.Len() > MaxResponse {
		return nil, errors.New("the answer is over " + strconv.Itoa(MaxResponse) + " bytes")
	}
	return b.Bytes(), nil
}

// answer reads the agent's side of the socket within the deadline; its end
// is io.EOF.
type answer struct {
	fd       int
	deadline int64
}

func (a answer) Read(b []byte) (n int, err error) {
	if err := retry(a.fd, syscall.SO_RCVTIMEO, a.deadline, func() (err error) {
		n, err = syscall.Read(a.fd, b)
		return err
	}); err != nil {
		return 0, err
	}
	if n == 0 && len(b) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// retry runs a blocking call on fd with what is left of the budget
// (deadline, on the monotonic clock) as its socket timeout (opt:
// SO_SNDTIMEO for connecting and sending, SO_RCVTIMEO for reading), again
// when a signal interrupted it (Go's runtime sends them). A socket
// timeout is EAGAIN.
func retry(fd, opt int, deadline int64, call func() error) error {
	for {
		left := deadline - monoNow()
		if left <= 0 {
			return errors.New("no answer within the budget")
		}
		tv := syscall.NsecToTimeval(left)
		if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
			return wrap("socket timeout", err)
		}
		err := call()
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EAGAIN):
			return wrap("no answer within the budget", err)
		}
		return err
	}
}
