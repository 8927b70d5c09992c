// Package lookups answers the plugin's pod lookups from the node agent's
// informer, over a unix socket in istio-cni's run directory (the entry's
// pod_socket): the wire format, Serve (the agent) and Get (the plugin).
// The same socket takes the shim's ADD hand-offs, which Serve tells from a
// lookup by their first bytes and passes to pkg/wire/handoff's Answer
// (that protocol's agent half). The agent already watches
// every pod on its node, so a lookup costs a local round trip instead of a
// TLS connection and an API GET per pod start. It is an optimisation only:
// the plugin falls back to the API whenever the agent is absent, slow, or
// does not hold the pod (Get's errors say which), and a pod read from
// either is the same pkg/kube subset, decoded from the same JSON.
package lookups

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
	"istio-cni.local/istio-cni/pkg/wire/sockfile"
)

// Version is the wire format's version; a reader refuses another.
const Version = 1

type request struct {
	V         int    `json:"v"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type response struct {
	V int `json:"v"`
	// Pod is nil when the agent's informer does not hold the pod.
	Pod *kube.Pod `json:"pod,omitempty"`
	// ReadsBack: the agent's audit reads the pod's rules back and repairs
	// them (it runs, repairs, and sees the node's namespaces), so ADD may
	// leave its own read-back to it.
	ReadsBack bool `json:"readsBack,omitempty"`
}

// Answer is the agent's answer to a lookup.
type Answer struct {
	Pod       *kube.Pod
	ReadsBack bool
}

// Limits: a request is a namespace and a name; a pod's subset is a few
// kilobytes, annotations included.
const (
	maxRequest  = 4 << 10
	maxResponse = 1 << 20
	// serveTimeout bounds one connection on the agent's side.
	serveTimeout = time.Second
)

// ErrNotHeld: the agent answered but its informer does not hold the pod
// (not yet synced, or not on this node). The plugin asks the API.
var ErrNotHeld = errors.New("the agent does not hold the pod")

// Get asks the agent at path for namespace/name within budget (connecting
// included). Any error means: ask the API instead.
func Get(path, namespace, name string, budget time.Duration) (Answer, error) {
	resp, err := get(path, namespace, name, budget)
	if err != nil {
		return Answer{}, err
	}
	return Answer{Pod: resp.Pod, ReadsBack: resp.ReadsBack}, nil
}

func get(path, namespace, name string, budget time.Duration) (*response, error) {
	deadline := time.Now().Add(budget)
	conn, err := net.DialTimeout("unix", path, budget) // #nosec G704 -- the entry's pod_socket, a local unix socket the installer names
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	b, err := json.Marshal(request{V: Version, Namespace: namespace, Name: name})
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(conn, maxResponse+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("the agent's answer is over %d bytes", maxResponse)
	}
	var resp response
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("the agent's answer: %w", err)
	}
	if resp.V != Version {
		return nil, fmt.Errorf("the agent answers version %d, want %d", resp.V, Version)
	}
	if resp.Pod == nil {
		return nil, ErrNotHeld
	}
	return &resp, nil
}

// Lookup returns the agent's copy of a pod, or false.
type Lookup func(namespace, name string) (*kube.Pod, bool)

// Server answers lookups on a unix socket.
type Server struct {
	path   string
	lookup Lookup
	log    *slog.Logger
	wg     sync.WaitGroup
	// ReadsBack says whether the audit reads back what ADD programs; nil:
	// never.
	ReadsBack func() bool
	// Add runs an ADD the plugin's shim hands over (handoff.Answer);
	// nil hands every ADD back.
	Add handoff.RunFunc

	mu   sync.Mutex
	ln   *net.UnixListener
	file sockfile.File
}

// checkInterval is how often Serve looks whether the socket file at its
// path is still the one it bound.
const checkInterval = time.Second

// Listen binds path (mode 0600; a socket left there by an earlier agent is
// replaced, anything else is refused).
func Listen(path string, lookup Lookup, log *slog.Logger) (*Server, error) {
	ln, file, err := bind(path)
	if err != nil {
		return nil, err
	}
	return &Server{path: path, ln: ln, file: file, lookup: lookup, log: log}, nil
}

// bind binds the stream socket at path (pkg/wire/sockfile).
func bind(path string) (*net.UnixListener, sockfile.File, error) {
	ln, file, err := sockfile.Bind(path, "unix", func(name string) (*net.UnixListener, error) {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			ln.SetUnlinkOnClose(false) // the file is renamed; a successor may own path by then
		}
		return ln, err
	})
	if err != nil {
		return nil, file, fmt.Errorf("pod lookups: %w", err)
	}
	return ln, file, nil
}

// Serve answers until ctx ends, then waits for the connections in flight.
// About every second it checks that the file at the path is still its
// socket and, when the file was removed (an uninstall, a cleanup of the run
// directory) or replaced by something nobody listens on, binds a new one
// there: the plugin then keeps finding the agent.
func (s *Server) Serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = s.ln.Close()
	})
	defer stop()
	for {
		s.mu.Lock()
		ln := s.ln
		_ = ln.SetDeadline(time.Now().Add(checkInterval))
		s.mu.Unlock()
		conn, err := ln.AcceptUnix()
		switch {
		case err == nil:
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.answer(conn)
			}()
			continue
		case ctx.Err() != nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.check(ctx)
			continue
		default:
			s.log.Error("pod lookups stopped", "error", err.Error())
		}
		break
	}
	s.wg.Wait()
}

// check binds a new socket when the file at the path is no longer ours and
// nobody else listens there (a newer agent's stays).
func (s *Server) check(ctx context.Context) {
	if ctx.Err() != nil || s.file.State() != sockfile.Lost {
		return // stopping (an uninstall removes the socket next), or not ours to bind
	}
	ln, file, err := bind(s.path)
	if err != nil {
		s.log.Warn("pod lookups: cannot bind the socket again", "path", s.path, "error", err.Error())
		return
	}
	s.mu.Lock()
	old := s.ln
	s.ln, s.file = ln, file
	s.mu.Unlock()
	_ = old.Close()
	s.log.Info("pod lookups: the socket was removed; bound it again", "path", s.path)
}

// answer serves one connection: only root on the node may ask (the socket
// is 0600 in a 0700 directory already; SO_PEERCRED holds even if those
// modes are widened). A request is a lookup, or an ADD the shim hands
// over with the pod's namespace as a descriptor.
func (s *Server) answer(conn *net.UnixConn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(serveTimeout))
	uid, err := peerUID(conn)
	if err != nil || uid != 0 {
		s.log.Warn("pod lookup refused: the peer is not root", "uid", uid, "error", errString(err))
		return
	}
	data, fds, err := readRequest(conn)
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}()
	if err != nil {
		return
	}
	if bytes.HasPrefix(data, []byte(handoff.Magic)) {
		_ = conn.SetDeadline(time.Now().Add(handoff.Budget + serveTimeout))
		handoff.Answer(conn, data, fds, s.Add)
		return
	}
	var req struct {
		V         int    `json:"v"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	}
	if len(data) > maxRequest || json.Unmarshal(data, &req) != nil || req.V != Version {
		return
	}
	resp := response{V: Version}
	if pod, ok := s.lookup(req.Namespace, req.Name); ok {
		resp.Pod = pod
		resp.ReadsBack = s.ReadsBack != nil && s.ReadsBack()
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	_, _ = conn.Write(b)
}

// readRequest reads a request and the descriptors that came with its
// first bytes: a lookup's JSON line, or a hand-off's frame, which the
// shim ends by closing its side.
func readRequest(conn *net.UnixConn) ([]byte, []int, error) {
	buf := make([]byte, 8<<10)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	var fds []int
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn])
		for i := range msgs {
			if perr != nil {
				break
			}
			got, rerr := syscall.ParseUnixRights(&msgs[i])
			if rerr == nil {
				fds = append(fds, got...)
			}
		}
	}
	if err != nil {
		return nil, fds, err
	}
	data := append([]byte(nil), buf[:n]...)
	magic := []byte(handoff.Magic)
	// A stream may split the Magic itself: a start that could still be
	// one is read on before the kind is told.
	for len(data) < len(magic) && bytes.HasPrefix(magic, data) {
		m, err := conn.Read(buf)
		if m == 0 && err != nil {
			return nil, fds, err
		}
		data = append(data, buf[:m]...)
	}
	frame := bytes.HasPrefix(data, magic)
	for frame || !bytes.Contains(data, []byte{'\n'}) {
		if len(data) > handoff.MaxRequest {
			return nil, fds, fmt.Errorf("request over %d bytes", handoff.MaxRequest)
		}
		m, err := conn.Read(buf)
		data = append(data, buf[:m]...)
		if frame && errors.Is(err, io.EOF) {
			return data, fds, nil
		}
		if m == 0 && err != nil {
			return nil, fds, err
		}
	}
	line, _, _ := bytes.Cut(data, []byte{'\n'})
	return line, fds, nil
}

// peerUID is the connecting process's user, from the kernel.
func peerUID(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var credErr error
	err = raw.Control(func(fd uintptr) {
		cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if err != nil {
			credErr = err
			return
		}
		uid = int(cred.Uid)
	})
	if err == nil {
		err = credErr
	}
	return uid, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
