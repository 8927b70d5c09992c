package poll

import (
	"sync"
	"testing"
	"time"
)

// TestPacedPausesAsLongAsASlowCall: a call longer than the interval is
// followed by a pause at least as long, so a slow watch never runs back to
// back. Only lower bounds are checked: a loaded machine lengthens pauses.
func TestPacedPausesAsLongAsASlowCall(t *testing.T) {
	const calls = 4
	var (
		mu    sync.Mutex
		spans [][2]time.Time
		full  = make(chan struct{})
	)
	stop := Paced(time.Millisecond, func() {
		began := time.Now()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, [2]time.Time{began, time.Now()})
		if len(spans) == calls {
			close(full)
		}
	})
	<-full
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < calls; i++ {
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
	const calls, interval = 4, 10 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []time.Time
		full   = make(chan struct{})
	)
	stop := Paced(interval, func() {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if len(starts) == calls {
			close(full)
		}
	})
	<-full
	stop()
	mu.Lock()
	defer mu.Unlock()
	// Each start is read inside the call, a moment after Paced's own: a
	// stall between the two shortens the gap seen by as much, hence half.
	for i := 1; i < calls; i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < interval/2 {
			t.Errorf("call %d began %v after call %d: want about %v", i, gap, i-1, interval)
		}
	}
}
