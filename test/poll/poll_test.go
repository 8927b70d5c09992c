package poll

import (
	"sync"
	"testing"
	"time"
)

// calls keeps what the first n calls of a repeated function saw.
type calls[T any] struct {
	mu   sync.Mutex
	n    int
	seen []T
	full chan struct{}
}

func newCalls[T any](n int) *calls[T] { return &calls[T]{n: n, full: make(chan struct{})} }

func (c *calls[T]) add(v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) < c.n {
		if c.seen = append(c.seen, v); len(c.seen) == c.n {
			close(c.full)
		}
	}
}

// wait returns the n calls' values once they are in, and stops.
func (c *calls[T]) wait(stop func()) []T {
	<-c.full
	stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// TestPacedPausesAsLongAsASlowCall: a call longer than the interval is
// followed by a pause at least as long, so a slow watch never runs back to
// back. Only lower bounds are checked: a loaded machine lengthens pauses.
func TestPacedPausesAsLongAsASlowCall(t *testing.T) {
	c := newCalls[[2]time.Time](4)
	spans := c.wait(Paced(time.Millisecond, func() {
		began := time.Now()
		time.Sleep(20 * time.Millisecond)
		c.add([2]time.Time{began, time.Now()})
	}))
	for i := 1; i < len(spans); i++ {
		took := spans[i-1][1].Sub(spans[i-1][0])
		if gap := spans[i][0].Sub(spans[i-1][1]); gap < took {
			t.Errorf("call %d began %v after call %d ended, which took %v: want a pause at least as long", i, gap, i-1, took)
		}
	}
}

// TestPacedPause: a quick call keeps the interval from one start to the
// next; one over half the interval is followed by a pause as long.
func TestPacedPause(t *testing.T) {
	const interval = 200 * time.Millisecond
	for _, c := range []struct{ took, want time.Duration }{
		{0, interval},
		{10 * time.Millisecond, 190 * time.Millisecond},
		{100 * time.Millisecond, 100 * time.Millisecond},
		{150 * time.Millisecond, 150 * time.Millisecond},
		{time.Second, time.Second},
	} {
		if got := pacedPause(interval, c.took); got != c.want {
			t.Errorf("pacedPause(%v, took %v) = %v, want %v", interval, c.took, got, c.want)
		}
	}
}

// TestPacedKeepsTheIntervalForQuickCalls: quick calls start an interval
// apart, not back to back.
func TestPacedKeepsTheIntervalForQuickCalls(t *testing.T) {
	const interval = 10 * time.Millisecond
	c := newCalls[time.Time](4)
	starts := c.wait(Paced(interval, func() { c.add(time.Now()) }))
	// Each start is read inside the call, a moment after Paced's own: a
	// stall between the two shortens the gap seen by as much, hence half.
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < interval/2 {
			t.Errorf("call %d began %v after call %d: want about %v", i, gap, i-1, interval)
		}
	}
}
