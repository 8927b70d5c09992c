package poll

import (
	"sync"
	"testing"
	"time"
)

// TestEveryPausesAsLongAsASlowCall: a call longer than the interval is
// followed by a pause at least as long, so a slow watch never runs back to
// back. Only lower bounds are checked: a loaded machine lengthens pauses.
func TestEveryPausesAsLongAsASlowCall(t *testing.T) {
	const calls = 4
	var (
		mu    sync.Mutex
		spans [][2]time.Time
		full  = make(chan struct{})
	)
	stop := Every(time.Millisecond, func() {
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

// TestEveryKeepsTheIntervalForQuickCalls: calls quicker than the interval
// start an interval apart, not back to back.
func TestEveryKeepsTheIntervalForQuickCalls(t *testing.T) {
	const calls, interval = 4, 10 * time.Millisecond
	var (
		mu     sync.Mutex
		starts []time.Time
		full   = make(chan struct{})
	)
	stop := Every(interval, func() {
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
	for i := 1; i < calls; i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < interval {
			t.Errorf("call %d began %v after call %d: want at least %v", i, gap, i-1, interval)
		}
	}
}
