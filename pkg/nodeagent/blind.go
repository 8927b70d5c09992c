package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// apiSight tells whether the agent sees its node through the API: its
// view of the node's pods (the informer's first list is in, and its last
// list or watch call was answered) and its last API request (any of the
// agent's, seen at its client's transport). Both come from the requests
// the agent makes anyway; the probe (Run) only bounds how long a quiet
// node can go without one, as a watch that carries nothing looks the same
// as a connection that died without a word.
//
// Losing the API changes neither readiness nor liveness: the files stay
// in place and the plugin keeps working (it asks the API itself), so the
// startup taint must not come back for it. It is said instead: a Warning
// log line once when it goes, an Info line when it is back, a Warning
// Event on the Node then (posted once the API answers, with the outage's
// start and length), and istio_cni_api_reachable.
type apiSight struct {
	now func() time.Time
	log *slog.Logger
	// back is called, outside the lock, when the API answers again after
	// a blind spell of at least blindEventMin (the Node's Event).
	back func(since time.Time, blind time.Duration, cause error)

	mu sync.Mutex
	// synced reports whether the pod view's first list is in; nil when
	// the agent keeps no pod view.
	synced  func() bool
	viewOK  bool      // the pod view's last list or watch call was answered
	viewErr error     // its error, if it was not
	reqErr  error     // the last request's failure; nil once one succeeds
	lastOK  time.Time // when a request was last answered
	since   time.Time // start of the blind spell; zero while not blind
	cause   error     // the error that started it
}

// blindEventMin: a shorter blind spell (a connection reset while the API
// server restarts) is logged, not posted as an Event on the Node.
const blindEventMin = 5 * time.Second

// probeTimeout bounds the probe: a request on a connection that died
// silently waits for nothing else.
const probeTimeout = 10 * time.Second

func newAPISight(log *slog.Logger, now func() time.Time) *apiSight {
	if now == nil {
		now = time.Now
	}
	return &apiSight{now: now, log: log}
}

// register exports the sight's series with reg.
func (s *apiSight) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "istio_cni_api_reachable",
			Help: "1 while the agent's view of its node's pods is synced and its last API request was answered; 0 while it cannot see the API server.",
		}, func() float64 {
			if s.Reachable() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "istio_cni_last_sync_timestamp_seconds",
			Help: "When the agent's view of its node's pods was last known in sync with the API server (now while it is; 0 before its first list).",
		}, func() float64 {
			t := s.lastSync()
			if t.IsZero() {
				return 0
			}
			return float64(t.UnixNano()) / 1e9
		}),
	)
}

// Reachable reports whether the agent sees the API: its pod view (if it
// keeps one) synced and answered, and its last request answered.
func (s *apiSight) Reachable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reachable()
}

func (s *apiSight) reachable() bool {
	if s.reqErr != nil {
		return false
	}
	if s.synced == nil {
		return true
	}
	return s.synced() && s.viewOK
}

// lastSync is when the pod view was last known in sync: now while the API
// is reachable, the start of the blind spell during one, zero before the
// first list.
func (s *apiSight) lastSync() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.reachable():
		return s.now()
	case !s.since.IsZero() && s.synced != nil && s.synced():
		return s.since
	}
	return time.Time{}
}

// setView ties the sight to the pod view's first list.
func (s *apiSight) setView(synced func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = synced
}

// observeView records the outcome of one of the pod view's list or watch
// calls (podcache's observer).
func (s *apiSight) observeView(err error) {
	if ignored(err) {
		return
	}
	s.observe(func() {
		s.viewOK, s.viewErr = err == nil, err
	}, err)
}

// observeRequest records the outcome of one API request.
func (s *apiSight) observeRequest(err error) {
	if ignored(err) {
		return
	}
	s.observe(func() {
		s.reqErr = err
		if err == nil {
			s.lastOK = s.now()
		}
	}, err)
}

// ignored: the agent's own cancellation says nothing of the API; an
// expired resource version (the informer lists again) and throttling are
// the API's answers.
func ignored(err error) bool {
	return errors.Is(err, context.Canceled) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsTooManyRequests(err)
}

// observe applies one outcome and says what changed: a failure while not
// blind starts a blind spell, the state reachable again ends it.
func (s *apiSight) observe(apply func(), err error) {
	var lost, found bool
	var since time.Time
	var cause error
	now := s.now()
	s.mu.Lock()
	apply()
	switch {
	case err != nil && s.since.IsZero():
		s.since, s.cause, lost = now, err, true
		since = now
	case !s.since.IsZero() && s.reachable():
		since, cause, found = s.since, s.cause, true
		s.since, s.cause = time.Time{}, nil
	}
	s.mu.Unlock()
	switch {
	case lost:
		s.log.Warn("API server unreachable: the agent's view of its node's pods is stale until it answers; the installed files, readiness and the taint are unchanged",
			"error", err.Error(), "since", since.Format(time.RFC3339Nano))
	case found:
		blind := now.Sub(since)
		s.log.Info("API server reachable again", "blind_for", blind.Round(time.Millisecond).String(),
			"since", since.Format(time.RFC3339Nano))
		if s.back != nil && blind >= blindEventMin {
			s.back(since, blind, cause)
		}
	}
}

// wrap observes every request of a client built from the rest.Config it
// wraps (rest.Config.Wrap).
func (s *apiSight) wrap(rt http.RoundTripper) http.RoundTripper {
	return observedTransport{rt: rt, sight: s}
}

type observedTransport struct {
	rt    http.RoundTripper
	sight *apiSight
}

// RoundTrip counts a request as unanswered when no response came, when
// the way to the API server says it is not serving (502, 503, 504), or
// when the agent's credential is refused (401): then it sees nothing. Any
// other status is an answer (a 404 or a 409 is the API speaking).
func (t observedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	switch {
	case err != nil:
		t.sight.observeRequest(err)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusBadGateway ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		t.sight.observeRequest(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status))
	default:
		t.sight.observeRequest(nil)
	}
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport beneath.
func (t observedTransport) WrappedRoundTripper() http.RoundTripper { return t.rt }

// probePeriod is how often the probe asks, from the audit's interval:
// within it, but never more than once in 5 s (a node's share of a large
// cluster's API load) nor less than once in 30 s.
func probePeriod(audit time.Duration) time.Duration {
	return min(max(audit, 5*time.Second), 30*time.Second)
}

// probeRetry is the first wait after a failed probe, doubled up to the
// period: one refused or 503 request (an API server rolling) is cleared
// within a second or two, not a period later.
const probeRetry = time.Second

// probe asks the API one cheap question each period until ctx ends, unless
// another request was answered within it; its outcome reaches the sight
// through the transport like any request's. After a failure it asks again
// sooner.
func (s *apiSight) probe(ctx context.Context, period time.Duration, ask func(context.Context) error) {
	wait := period
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch {
		case s.answeredWithin(period):
			wait = period
		default:
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			err := ask(pctx)
			cancel()
			switch {
			case err == nil || !s.Blind():
				wait = period
			case wait >= period:
				wait = probeRetry
			default:
				wait = min(2*wait, period)
			}
		}
		t.Reset(wait)
	}
}

// answeredWithin: the API answered a request less than d ago, and none
// failed since.
func (s *apiSight) answeredWithin(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqErr == nil && !s.lastOK.IsZero() && s.now().Sub(s.lastOK) < d
}

// Blind reports whether a blind spell is going on.
func (s *apiSight) Blind() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.since.IsZero()
}
