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
// more than once.
func Every(interval time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			f()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}
