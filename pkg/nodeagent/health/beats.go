// Package health tells whether the node agent is alive: each of its loops
// shows progress within a bound of its own, and /healthz fails, so kubelet
// restarts the agent, when one has not. Readiness (/readyz) is another
// matter: a not-ready agent that keeps trying is alive.
package health

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Beats are the agent's loops and when each last made progress.
type Beats struct {
	mu    sync.Mutex
	now   func() time.Time
	parts map[string]*Beat
}

// NewBeats returns an empty set; now is the clock (nil: time.Now).
func NewBeats(now func() time.Time) *Beats {
	if now == nil {
		now = time.Now
	}
	return &Beats{now: now, parts: map[string]*Beat{}}
}

// Beat is one loop's progress. A loop that runs all the time calls Beat
// at least once per bound; a step that runs now and then (a token mint)
// brackets itself with Start and Done, and is stuck only if it runs longer
// than its bound.
type Beat struct {
	b       *Beats
	name    string
	bound   time.Duration
	last    time.Time // last Beat or Done
	started time.Time // Start without Done yet; zero when idle
	episode bool      // Start/Done kind: idle counts as alive
}

// Loop registers a loop that must beat at least once per bound.
func (b *Beats) Loop(name string, bound time.Duration) *Beat {
	return b.add(&Beat{name: name, bound: bound})
}

// Episodic registers a step that must finish within bound once started.
func (b *Beats) Episodic(name string, bound time.Duration) *Beat {
	return b.add(&Beat{name: name, bound: bound, episode: true})
}

func (b *Beats) add(p *Beat) *Beat {
	b.mu.Lock()
	defer b.mu.Unlock()
	p.b, p.last = b, b.now()
	b.parts[p.name] = p
	return p
}

// Beat records progress. Safe on a nil Beat (no liveness configured).
func (p *Beat) Beat() {
	if p == nil {
		return
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.last = p.b.now()
}

// Start marks an episodic step as running.
func (p *Beat) Start() {
	if p == nil {
		return
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.started = p.b.now()
}

// Done marks it finished, whatever its result.
func (p *Beat) Done() {
	if p == nil {
		return
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	p.started, p.last = time.Time{}, p.b.now()
}

// Check returns nil while every part shows progress within its bound, or
// an error naming each that does not.
func (b *Beats) Check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	var stale []string
	for _, p := range b.parts {
		switch {
		case p.episode && !p.started.IsZero() && now.Sub(p.started) > p.bound:
			stale = append(stale, fmt.Sprintf("%s running for %s (bound %s)", p.name, now.Sub(p.started).Round(time.Second), p.bound))
		case !p.episode && now.Sub(p.last) > p.bound:
			stale = append(stale, fmt.Sprintf("%s silent for %s (bound %s)", p.name, now.Sub(p.last).Round(time.Second), p.bound))
		}
	}
	if len(stale) == 0 {
		return nil
	}
	slices.Sort(stale)
	return fmt.Errorf("no progress: %s", strings.Join(stale, "; "))
}
