// Package agentpods answers the plugin's pod lookups from the node agent's
// informer, over a unix socket in istio-cni's run directory: the wire
// format, Serve (the agent) and Get (the plugin). The agent already watches
// every pod on its node, so a lookup costs a local round trip instead of a
// TLS connection and an API GET per pod start. It is an optimisation only:
// the plugin falls back to the API whenever the agent is absent, slow, or
// does not hold the pod (Get's errors say which), and a pod read from
// either is the same pkg/kube subset, decoded from the same JSON.
package agentpods

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
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
func Get(path, namespace, name string, budget time.Duration) (*kube.Pod, error) {
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
	return resp.Pod, nil
}

// Lookup returns the agent's copy of a pod, or false.
type Lookup func(namespace, name string) (*kube.Pod, bool)

// Server answers lookups on a unix socket.
type Server struct {
	ln     *net.UnixListener
	lookup Lookup
	log    *slog.Logger
	wg     sync.WaitGroup
}

// Listen binds path (mode 0600; a socket left there by an earlier agent is
// replaced, anything else is refused).
func Listen(path string, lookup Lookup, log *slog.Logger) (*Server, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("pod lookups: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("pod lookups: %w", err)
		}
	}
	tmp := path + ".new"
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the file is renamed; a successor may own path by then
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("pod lookups: %w", err)
	}
	return &Server{ln: ln, lookup: lookup, log: log}, nil
}

// Serve answers until ctx ends, then waits for the connections in flight.
func (s *Server) Serve(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = s.ln.Close() })
	defer stop()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("pod lookups stopped", "error", err.Error())
			}
			break
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(conn)
		}()
	}
	s.wg.Wait()
}

// answer serves one connection: only root on the node may ask (the socket
// is 0600 in a 0700 directory already; SO_PEERCRED holds even if those
// modes are widened).
func (s *Server) answer(conn *net.UnixConn) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(serveTimeout))
	uid, err := peerUID(conn)
	if err != nil || uid != 0 {
		s.log.Warn("pod lookup refused: the peer is not root", "uid", uid, "error", errString(err))
		return
	}
	line, err := bufio.NewReaderSize(io.LimitReader(conn, maxRequest), maxRequest).ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	if json.Unmarshal(line, &req) != nil || req.V != Version {
		return
	}
	resp := response{V: Version}
	if pod, ok := s.lookup(req.Namespace, req.Name); ok {
		resp.Pod = pod
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	_, _ = conn.Write(b)
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
