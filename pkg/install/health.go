package install

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serve runs the health and metrics endpoints until ctx ends.
func (in *Installer) serve(ctx context.Context) (stop func(), err error) {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := in.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	metrics := http.NewServeMux()
	metrics.Handle("/metrics", promhttp.HandlerFor(in.metrics.Registry, promhttp.HandlerOpts{}))
	var servers []*http.Server
	for _, s := range []struct {
		addr string
		h    http.Handler
	}{{in.cfg.HealthAddr, health}, {in.cfg.MetricsAddr, metrics}} {
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			for _, srv := range servers {
				_ = srv.Close()
			}
			return nil, fmt.Errorf("listening on %s: %w", s.addr, err)
		}
		in.mu.Lock()
		in.addrs = append(in.addrs, ln.Addr().String())
		in.mu.Unlock()
		srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				in.log.Error("endpoint stopped", "addr", s.addr, "error", err.Error())
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
