package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the endpoints' servers: kubelet's probes and a scraper send
// small requests; a client that trickles headers or holds idle
// connections gets nothing more.
const (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 60 * time.Second
	// bindWait: the previous agent pod on this node may hold the ports a
	// while longer (host network; it is still shutting down, up to its
	// grace period).
	bindWait = 45 * time.Second
)

// serve runs /healthz, /readyz and /metrics until ctx ends. /readyz is the
// installer's readiness; /healthz is liveness: every loop made progress
// within its bound (pkg/nodeagent/health).
func (a *Agent) serve(ctx context.Context) (stop func(), err error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.beats.Check(); err != nil {
			http.Error(w, "not alive: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.installer.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{}))
	var servers []*http.Server
	closeAll := func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
	}
	for _, s := range []struct {
		addr string
		h    http.Handler
	}{{a.cfg.HealthAddr, health}, {a.cfg.MetricsAddr, metrics}} {
		ln, err := a.listen(ctx, s.addr)
		if err != nil {
			closeAll()
			return nil, err
		}
		a.addrs.add(ln.Addr().String())
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("endpoint stopped", "addr", s.addr, "error", err.Error())
			}
		}()
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(sctx)
		}
	}, nil
}

// listen binds addr, waiting while another process holds it: the agent
// this one replaces may still be stopping.
func (a *Agent) listen(ctx context.Context, addr string) (net.Listener, error) {
	deadline := time.Now().Add(bindWait)
	for logged := false; ; {
		ln, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("listening on %s: %w", addr, err)
			}
			return ln, nil
		}
		if !logged {
			a.log.Info("address in use (the previous agent is still stopping?); waiting", "addr", addr, "for", bindWait.String())
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("listening on %s: %w", addr, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// addrList is the endpoints' bound addresses (tests bind port 0).
type addrList struct {
	mu    sync.Mutex
	addrs []string
}

func (l *addrList) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs = append(l.addrs, s)
}

// Addrs returns the health and metrics endpoints' addresses once bound.
func (a *Agent) Addrs() []string {
	a.addrs.mu.Lock()
	defer a.addrs.mu.Unlock()
	return append([]string(nil), a.addrs.addrs...)
}
