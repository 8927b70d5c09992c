// Package poll is the tests' one way to wait for a condition: check it,
// sleep a little (1 ms at first, doubling up to 100 ms, so fast conditions
// are seen fast and slow ones cost little), until it holds or a deadline
// passes. The deadline only turns a hang into a failure; no test asserts on
// how long a wait took.
package poll

import (
	"fmt"
	"sync"
	"time"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

const (
	firstSleep = time.Millisecond
	maxSleep   = 100 * time.Millisecond
)

// Wait calls cond until it holds or timeout passes; then it returns an
// error naming what was awaited and what cond last saw.
func Wait(timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	sleep := firstSleep
	for {
		ok, saw := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if saw == "" {
				return fmt.Errorf("%s: not within %v", what, timeout)
			}
			return fmt.Errorf("%s: not within %v; last saw: %s", what, timeout, saw)
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, maxSleep)
	}
}

// Until is Wait that fails the test.
func Until(t TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if err := Wait(timeout, what, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

// UntilTrue is Until for a condition with nothing to say.
func UntilTrue(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// Every calls f every interval in the background until the returned stop
// is called; stop waits for a call in progress to end, and may be called
// more than once. A call longer than interval is followed at once by the
// next: a watch for a short gap catches up after a stall.
func Every(interval time.Duration, f func()) (stop func()) {
	return repeat(f, func(took time.Duration) time.Duration { return interval - took })
}

// Paced is Every for a watch whose calls start processes (an nsenter and
// its iptables-save, say): the next call starts interval after the last
// began, and never sooner after it ended than it took. On a loaded machine,
// where such a call takes longer than half the interval, the watch takes
// at most half a core instead of all of one beside the operation it
// watches; where calls are quicker, the pace is interval.
func Paced(interval time.Duration, f func()) (stop func()) {
	return repeat(f, func(took time.Duration) time.Duration { return pacedPause(interval, took) })
}

// pacedPause is how long Paced waits after a call that took took.
func pacedPause(interval, took time.Duration) time.Duration { return max(interval-took, took) }

// repeat calls f, then waits pause(how long f took), until stopped.
func repeat(f func(), pause func(took time.Duration) time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			began := time.Now()
			f()
			wait := time.NewTimer(pause(time.Since(began)))
			select {
			case <-quit:
				wait.Stop()
				return
			case <-wait.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}
