package audit

import (
	"context"
	"testing"
	"time"
)

// timers stands in for time.After in gather: each call is announced on
// asked with the duration asked for, and fires when the test sends on the
// channel it returns.
type timers struct{ asked chan timer }

type timer struct {
	d    time.Duration
	fire chan time.Time
}

func (ts timers) after(d time.Duration) <-chan time.Time {
	t := timer{d: d, fire: make(chan time.Time, 1)}
	ts.asked <- t
	return t.fire
}

// next is the next timer gather asks for, of duration d.
func (ts timers) next(t *testing.T, d time.Duration) timer {
	t.Helper()
	select {
	case got := <-ts.asked:
		if got.d != d {
			t.Fatalf("gather asked for a %v timer, want %v", got.d, d)
		}
		return got
	case <-time.After(10 * time.Second):
		t.Fatalf("gather asked for no %v timer", d)
	}
	return timer{}
}

func startGather(h *harness, only map[string]bool) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		h.a.gather(context.Background(), only)
	}()
	return done
}

// A pod woken before the wakes pause joins the pass; the pass starts when
// they do.
func TestWakesOfABurstShareAPass(t *testing.T) {
	h := newHarness(t, Repair)
	ts := timers{asked: make(chan timer, 10)}
	h.a.after = ts.after
	only := map[string]bool{"uid-a": true}
	done := startGather(h, only)
	ts.next(t, wakeWithin)
	ts.next(t, wakeQuiet)
	h.a.Wake("uid-b") // before the pause
	quiet := ts.next(t, wakeQuiet)
	select {
	case <-done:
		t.Fatal("the pass started before the wakes paused")
	default:
	}
	quiet.fire <- time.Now()
	waitDone(t, done)
	if !only["uid-b"] || len(only) != 2 {
		t.Errorf("one pass for %v, want uid-a and uid-b", only)
	}
}

// Wakes that never pause do not hold the pass back past wakeWithin.
func TestWakesThatNeverPauseStillGetAPass(t *testing.T) {
	h := newHarness(t, Repair)
	ts := timers{asked: make(chan timer, 10)}
	h.a.after = ts.after
	only := map[string]bool{"uid-a": true}
	done := startGather(h, only)
	bound := ts.next(t, wakeWithin)
	for _, uid := range []string{"uid-b", "uid-c", "uid-d"} {
		ts.next(t, wakeQuiet)
		h.a.Wake(uid)
	}
	ts.next(t, wakeQuiet)
	bound.fire <- time.Now()
	waitDone(t, done)
	if len(only) != 4 {
		t.Errorf("one pass for %v, want the four pods", only)
	}
}

func waitDone(t *testing.T, done chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("gather did not return when its timer fired")
	}
}
