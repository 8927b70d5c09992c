package audit

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
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

// startGather runs gather for a pass woken by uid-a, on timers the test
// fires; done closes when it returns.
func startGather(t *testing.T) (h *harness, ts timers, only map[string]bool, done chan struct{}) {
	h = newHarness(t, Repair)
	ts = timers{asked: make(chan timer, 10)}
	h.a.after = ts.after
	only = map[string]bool{"uid-a": true}
	done = make(chan struct{})
	go func() {
		defer close(done)
		h.a.gather(context.Background(), only)
	}()
	return h, ts, only, done
}

// A pod woken before the wakes pause joins the pass; the pass starts when
// they do.
func TestWakesOfABurstShareAPass(t *testing.T) {
	h, ts, only, done := startGather(t)
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
	h, ts, only, done := startGather(t)
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

// countingNamespaces counts the passes that looked for namespaces.
type countingNamespaces struct {
	fakeNamespaces
	finds chan struct{}
}

func (c countingNamespaces) Find(pods map[string][]netip.Addr) (netnsdir.Result, error) {
	c.finds <- struct{}{}
	return c.fakeNamespaces.Find(pods)
}

// An agent stopping while a woken pass gathers its wakes makes no pass:
// its checks would fail on the ended context, and say so on the pods.
func TestStoppingWhileGatheringMakesNoPass(t *testing.T) {
	h := newHarness(t, Repair)
	h.add(meshed("web"), true)
	finds := make(chan struct{}, 10)
	h.a.deps.Namespaces = countingNamespaces{h.ns, finds}
	ts := timers{asked: make(chan timer, 10)}
	h.a.after = ts.after
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.a.Run(ctx, nil)
	}()
	<-finds // the first full pass
	h.a.Wake("uid-web")
	ts.next(t, wakeWithin)
	cancel()
	waitDone(t, done)
	if n := len(finds); n != 0 {
		t.Errorf("%d passes after the agent stopped", n)
	}
}
