package cluster

import (
	"context"
	"errors"
	"fmt"
)

// Pause takes kube-apiserver down alone, as a control-plane outage: SIGTERM
// to the PID it started, SIGKILL after the grace period. etcd keeps
// running, and so do a node's kubelet, controllers and scheduler, which
// retry until Resume. Pausing a paused server does nothing.
func (a *APIServer) Pause() error {
	p := a.apiProc()
	if p == nil {
		return errors.New("cluster: pause: kube-apiserver was never started")
	}
	err := p.stop(a.grace)
	// Connections to the old process are dead; drop them rather than have
	// the first request after Resume find out.
	a.admin.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("cluster: pause: %w", err)
	}
	return nil
}

// Resume starts kube-apiserver again after Pause, with the same binary,
// arguments (so the same port, certificates and etcd) and log file, and
// returns once /readyz answers 200, within ctx and Options.StartTimeout.
// A detached cluster's PID file then names the new process. Once Stop has
// run, Resume fails.
func (a *APIServer) Resume(ctx context.Context) error {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return errors.New("cluster: resume: the API server is stopped")
	}
	p, err := a.launcher.restart(a.apiserv)
	if err == nil {
		a.apiserv = p
	}
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster: resume: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	// If it never gets ready it keeps running, as after a failed start:
	// Stop ends it.
	if err := poll(ctx, p, a.readyz); err != nil {
		return fmt.Errorf("cluster: resume: %w", err)
	}
	return nil
}

// apiProc is the current kube-apiserver process (nil before it started).
func (a *APIServer) apiProc() *proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apiserv
}
