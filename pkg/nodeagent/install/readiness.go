package install

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// readiness is what /readyz says: the loop sets it, other goroutines (the
// endpoints, the taint controller) read it.
type readiness struct {
	log     *slog.Logger
	metrics *Metrics
	changed chan struct{} // signalled after each change
	now     func() time.Time
	start   time.Time // when the installer was built, at the agent's start

	mu       sync.Mutex
	ever     bool // ready at least once
	ok       bool
	why      string
	conflist string
}

func newReadiness(log *slog.Logger, m *Metrics, now func() time.Time) *readiness {
	r := &readiness{log: log, metrics: m, why: "starting", changed: make(chan struct{}, 1), now: now, start: now()}
	m.StartTime.Set(float64(r.start.UnixNano()) / 1e9)
	return r
}

func (r *readiness) get() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.why
}

func (r *readiness) conflistName() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conflist
}

// set records the state; conflist is our chained conflist's name now.
func (r *readiness) set(ok bool, why, conflist, primary string) {
	r.mu.Lock()
	changed := r.ok != ok || r.why != why
	first := ok && !r.ever
	r.ever = r.ever || ok
	r.ok, r.why, r.conflist = ok, why, conflist
	r.mu.Unlock()
	if first {
		r.metrics.ReadySeconds.Set(r.now().Sub(r.start).Seconds())
	}
	if ok {
		r.metrics.Ready.Set(1)
	} else {
		r.metrics.Ready.Set(0)
	}
	if !changed {
		return
	}
	select {
	case r.changed <- struct{}{}:
	default: // one pending signal is enough: readers call get
	}
	if ok {
		r.log.Info("ready", "conflist", conflist, "primary", primary)
	} else {
		r.log.Warn("not ready", "reason", why)
	}
}

func (in *Installer) setReady(ok bool, why string) {
	in.ready.set(ok, why, in.files.owned, in.files.primary)
}

// updateReadiness: ready only while no step failed, every watch is armed,
// and the runtime's pick (the first config file) is our chained conflist.
func (in *Installer) updateReadiness() {
	var problems []error
	for _, file := range []string{fileBinary, fileKubeconfig, fileConflist} {
		problems = append(problems, in.files.problems[file])
	}
	switch err := errors.Join(problems...); {
	case in.fights.active != nil:
		in.setReady(false, "conflict: "+in.fights.active.String()+"; repairing at most once a second")
	case err != nil:
		in.setReady(false, err.Error())
	case len(in.unwatched) > 0:
		in.setReady(false, "not watching "+in.unwatched[0]+" (waiting for it to exist)")
	default:
		if err := in.verifyFirst(); err != nil {
			in.setReady(false, err.Error())
			return
		}
		in.setReady(true, "")
	}
}
