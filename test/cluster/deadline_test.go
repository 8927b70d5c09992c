package cluster

import (
	"testing"
	"time"
)

// The teardown fires AbortBudget before go test's panic, and not at all
// when the run is too short to spare it.
func TestAbortAt(t *testing.T) {
	now := time.Date(2026, 11, 24, 7, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		deadline time.Time
		want     time.Time
		armed    bool
	}{
		{"no timeout", time.Time{}, time.Time{}, false},
		{"the default 10m", now.Add(10 * time.Minute), now.Add(10*time.Minute - AbortBudget), true},
		{"make test's 20m", now.Add(20 * time.Minute), now.Add(20*time.Minute - AbortBudget), true},
		{"too short to spare the budget", now.Add(2 * AbortBudget), time.Time{}, false},
		{"already past", now.Add(-time.Second), time.Time{}, false},
	} {
		got, armed := abortAt(c.deadline, now)
		if armed != c.armed || !got.Equal(c.want) {
			t.Errorf("%s: abortAt = %v, %v; want %v, %v", c.name, got, armed, c.want, c.armed)
		}
	}
}

// A TestMain reads the timeout before m.Run parses the flags: TestDeadline
// must see the -test.timeout go test passed (the e2e's abort never armed
// while it read the unparsed default), and be no later than go test's own.
func TestTestDeadlineSeesTheTimeoutFlag(t *testing.T) {
	start := time.Now()
	got := TestDeadline()
	want, ok := t.Deadline()
	if !ok {
		t.Skip("run without -timeout")
	}
	if got.IsZero() {
		t.Fatal("TestDeadline is zero under go test's -timeout")
	}
	// go test's alarm started before this test ran: TestDeadline counts
	// from later, by at most how long the package has run.
	if got.Before(want) || got.After(want.Add(time.Since(start)+time.Minute)) {
		t.Errorf("TestDeadline %v, t.Deadline %v", got, want)
	}
}
