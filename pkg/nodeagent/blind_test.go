package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/test/poll"
)

// logBuffer is a log's text, written from any goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count is how many of the log's lines hold every one of parts.
func (l *logBuffer) count(parts ...string) int {
	n := 0
	for line := range strings.Lines(l.String()) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

type backCall struct {
	since time.Time
	blind time.Duration
	cause error
}

// The sight goes blind at the first failure, says so once, and is back
// only once both the pod view and the requests are answered: then it
// says for how long, and a spell of blindEventMin or more goes to the
// Node's Event.
func TestSightSaysWhenBlind(t *testing.T) {
	var log logBuffer
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	s := newAPISight(slog.New(slog.NewJSONHandler(&log, nil)), func() time.Time { return now })
	var backs []backCall
	s.back = func(since time.Time, blind time.Duration, cause error) {
		backs = append(backs, backCall{since, blind, cause})
	}
	reg := prometheus.NewPedanticRegistry()
	s.register(reg)
	synced := false
	s.setView(func() bool { return synced })
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("%s not exported", name)
		return 0
	}
	unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

	// Starting: requests answered, the first list not in yet.
	s.observeRequest(nil)
	if gauge("istio_cni_api_reachable") != 0 || gauge("istio_cni_last_sync_timestamp_seconds") != 0 {
		t.Error("reachable, or a last sync, before the pod view's first list")
	}
	s.observeView(nil)
	synced = true
	if gauge("istio_cni_api_reachable") != 1 || gauge("istio_cni_last_sync_timestamp_seconds") != unix(now) {
		t.Error("not reachable, or the last sync not now, once synced")
	}

	// The API goes: the watch's next call is refused.
	refused := errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	lost := now
	s.observeView(refused)
	now = now.Add(2 * time.Second)
	s.observeRequest(refused)
	s.observeView(refused)
	if gauge("istio_cni_api_reachable") != 0 || gauge("istio_cni_last_sync_timestamp_seconds") != unix(lost) {
		t.Errorf("blind: reachable %v, last sync %v, want 0 and %v", gauge("istio_cni_api_reachable"),
			gauge("istio_cni_last_sync_timestamp_seconds"), unix(lost))
	}
	if n := log.count(`"level":"WARN"`, "API server unreachable", "connection refused", lost.Format(time.RFC3339Nano)); n != 1 {
		t.Errorf("%d Warn lines naming the error and the start, want 1:\n%s", n, log.String())
	}
	// Requests answer again while the informer still backs off: its view
	// is not current yet.
	now = now.Add(5 * time.Second)
	s.observeRequest(nil)
	if s.Reachable() || len(backs) != 0 || log.count("reachable again") != 0 {
		t.Error("back before the pod view's watch was answered")
	}
	now = now.Add(time.Second)
	s.observeView(nil)
	if !s.Reachable() || gauge("istio_cni_api_reachable") != 1 {
		t.Error("not reachable once the watch is answered")
	}
	if n := log.count(`"level":"INFO"`, "API server reachable again", `"blind_for":"8s"`); n != 1 {
		t.Errorf("%d Info lines saying how long it was blind, want 1:\n%s", n, log.String())
	}
	if len(backs) != 1 || !backs[0].since.Equal(lost) || backs[0].blind != 8*time.Second || !errors.Is(backs[0].cause, refused) {
		t.Errorf("the Node's Event: %+v, want one from %v for 8s caused by %v", backs, lost, refused)
	}

	// A blip (a connection reset while the API server restarts) is logged
	// both ways, without an Event.
	s.observeRequest(errors.New("read: connection reset by peer"))
	now = now.Add(300 * time.Millisecond)
	s.observeRequest(nil)
	if log.count("API server unreachable") != 2 || log.count("reachable again") != 2 || len(backs) != 1 {
		t.Errorf("a 300ms blip: %d Events, log:\n%s", len(backs), log.String())
	}
	// The agent's own cancellation, and an expired resource version, say
	// nothing of the API.
	s.observeView(context.Canceled)
	s.observeRequest(fmt.Errorf("watch: %w", context.Canceled))
	if !s.Reachable() {
		t.Error("blind after a cancellation")
	}
}

// The transport counts what is an answer: any status but 401, 502, 503
// and 504; no response at all is none.
func TestSightTransport(t *testing.T) {
	status := http.StatusNotFound
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	s := newAPISight(slog.New(slog.DiscardHandler), nil)
	c := &http.Client{Transport: s.wrap(http.DefaultTransport)}
	for _, tc := range []struct {
		status int
		answer bool
	}{{404, true}, {409, true}, {403, true}, {429, true}, {500, true}, {503, false}, {401, false}, {504, false}, {200, true}} {
		status = tc.status
		resp, err := c.Get(srv.URL) //nolint:noctx // a test against a local server
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if s.Reachable() != tc.answer {
			t.Errorf("HTTP %d: reachable %v, want %v", tc.status, s.Reachable(), tc.answer)
		}
	}
	srv.Close()
	if resp, err := c.Get(srv.URL); err == nil { //nolint:noctx // a test against a local server
		_ = resp.Body.Close()
		t.Fatal("a closed server answered")
	}
	if s.Reachable() {
		t.Error("reachable with no response")
	}
}

// Readiness and liveness are the installer's and the loops': an agent that
// cannot see the API server at all says so (the metric and one Warn line)
// and stays ready and alive, so the startup taint never comes back for it.
func TestReadinessUnchangedWhileBlind(t *testing.T) {
	n := newFakeNode(t)
	n.env["NODE_NAME"] = "node-a"
	n.env["AUDIT_ACTION"] = "off" // the pod view stays, for missed injections
	n.env["AUDIT_INTERVAL"] = "1s"
	// An address nothing listens on: every request is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	cfg, err := ParseFlags(nil, n.getenv, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	a, err := New(cfg, &rest.Config{Host: "http://" + dead}, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int32
	ask := a.probe
	a.probe = func(ctx context.Context) error {
		probes.Add(1)
		return ask(ctx)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	poll.Until(t, 10*time.Second, "serving", func() (bool, string) { return len(a.Addrs()) == 2, fmt.Sprint(a.Addrs()) })
	health, metrics := "http://"+a.Addrs()[0], "http://"+a.Addrs()[1]
	poll.Until(t, 20*time.Second, "ready, and blind", func() (bool, string) {
		code, body := get(t, health+"/readyz")
		_, m := get(t, metrics+"/metrics")
		return code == http.StatusOK && strings.Contains(m, "istio_cni_api_reachable 0") &&
			log.count("API server unreachable", dead) == 1, body + "\n" + log.String()
	})
	// Blind through three probes and the informer's retries: ready and
	// alive at every sample.
	var mu sync.Mutex
	var bad []string
	stop := poll.Every(20*time.Millisecond, func() {
		for _, path := range []string{"/readyz", "/healthz"} {
			resp, err := http.Get(health + path) //nolint:noctx // a test against a local server
			if err != nil {
				mu.Lock()
				bad = append(bad, err.Error())
				mu.Unlock()
				continue
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || testutil.ToFloat64(a.metrics.Ready) != 1 {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%s %d, istio_cni_install_ready %v", path, resp.StatusCode, testutil.ToFloat64(a.metrics.Ready)))
				mu.Unlock()
			}
		}
	})
	from := probes.Load()
	poll.UntilTrue(t, time.Minute, "three more probes", func() bool { return probes.Load() >= from+3 })
	stop()
	if len(bad) != 0 {
		t.Errorf("while blind: %q", bad)
	}
	if _, m := get(t, metrics+"/metrics"); !strings.Contains(m, "istio_cni_api_reachable 0") {
		t.Error("reachable with nothing listening")
	}
	if n := log.count("API server unreachable"); n != 1 {
		t.Errorf("%d Warn lines for one blind spell:\n%s", n, log.String())
	}
}

// TestProbePeriod: the probe follows the audit's interval within 5 s to
// 30 s: a 1 s audit does not make a large cluster's agents ask the API
// every second, an hour's does not leave a dead connection unseen.
func TestProbePeriod(t *testing.T) {
	for audit, want := range map[time.Duration]time.Duration{
		time.Second: 5 * time.Second, 2 * time.Second: 5 * time.Second, 10 * time.Second: 10 * time.Second,
		30 * time.Second: 30 * time.Second, time.Hour: 30 * time.Second,
	} {
		if got := probePeriod(audit); got != want {
			t.Errorf("probePeriod(%v) = %v, want %v", audit, got, want)
		}
	}
}
