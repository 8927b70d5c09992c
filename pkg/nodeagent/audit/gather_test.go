package audit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Pods woken while the wakes have not paused are read back in the same
// pass: a burst of pod starts costs one pass, after it.
func TestWakesOfABurstShareAPass(t *testing.T) {
	h := newHarness(t, Repair)
	h.a.quiet, h.a.within = time.Hour, 300*time.Millisecond // the wakes never pause here
	only := map[string]bool{"uid-0": true}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.a.gather(context.Background(), only)
	}()
	for i := 1; i < 5; i++ {
		h.a.Wake(fmt.Sprint("uid-", i))
	}
	<-done
	if len(only) != 5 {
		t.Errorf("one pass for %v, want the five pods woken", only)
	}
}

// Wakes that never pause do not hold the pass back past its bound.
func TestWakesThatNeverPauseStillGetAPass(t *testing.T) {
	h := newHarness(t, Repair)
	h.a.quiet, h.a.within = time.Hour, 50*time.Millisecond
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				h.a.Wake(fmt.Sprint("uid-", i%300))
				time.Sleep(time.Millisecond) // a steady trickle, not a test wait
			}
		}
	}()
	only := map[string]bool{"uid-first": true}
	h.a.gather(context.Background(), only) // returns: the test's deadline is the check
	if !only["uid-first"] {
		t.Errorf("the first pod is no longer in the pass: %v", only)
	}
}
