package install

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/poll"
)

// fakeMinter hands out plugin-1, plugin-2, ... each valid for ttl by its
// clock; it fails while failing is set, and blocks until its context ends
// while hanging is. It records every call.
type fakeMinter struct {
	mu               sync.Mutex
	ttl              time.Duration
	now              func() time.Time // the expiries' clock; nil: time.Now
	calls, serial    int
	failing, hanging bool
	refuse           error // returned while set, as the API server refuses
	inFlight         int   // calls not returned yet
	mostInFlight     int
	log              []mintCall
}

// mintCall is one call, in real time.
type mintCall struct {
	start, end time.Time // end: zero while in flight
	ok         bool
}

func (f *fakeMinter) mint(ctx context.Context) (string, time.Time, error) {
	f.mu.Lock()
	f.calls++
	f.inFlight++
	f.mostInFlight = max(f.mostInFlight, f.inFlight)
	i := len(f.log)
	f.log = append(f.log, mintCall{start: time.Now()})
	hang, fail, refuse := f.hanging, f.failing, f.refuse
	f.mu.Unlock()
	token, expires, err := f.answer(ctx, hang, fail, refuse)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	f.log[i].end, f.log[i].ok = time.Now(), err == nil
	return token, expires, err
}

func (f *fakeMinter) answer(ctx context.Context, hang, fail bool, refuse error) (string, time.Time, error) {
	switch {
	case refuse != nil:
		return "", time.Time{}, refuse
	case hang:
		<-ctx.Done()
		return "", time.Time{}, ctx.Err()
	case fail:
		return "", time.Time{}, errors.New("TokenRequest refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now
	if f.now != nil {
		now = f.now
	}
	f.serial++
	return fmt.Sprintf("plugin-%d", f.serial), now().Add(f.ttl), nil
}

func (f *fakeMinter) set(failing, hanging bool) {
	f.mu.Lock()
	f.failing, f.hanging = failing, hanging
	f.mu.Unlock()
}

func (f *fakeMinter) counts() (calls, serial int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.serial
}

// history is every call so far, in the order they started.
func (f *fakeMinter) history() []mintCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// The keeper hands the loop each mint's news before it can start the next
// mint: once call k+1 has started, the loop has taken the news of call k,
// and anything the test does afterwards reaches the loop after it.
func (n *node) mintsStarted(m *fakeMinter, what string, calls int) {
	n.t.Helper()
	n.eventually(what, func() (bool, string) {
		now, _ := m.counts()
		return now >= calls, fmt.Sprint(now, " mints")
	})
}

func (n *node) kubeconfig() string { return n.read(filepath.Join(n.kc, KubeconfigName)) }

// minting sets up the node to mint with m, retrying failures every 50 ms
// and giving up on a mint after 300 ms.
func (n *node) minting(m *fakeMinter) {
	n.mint = m.mint
	n.tweak = func(in *Installer) { in.tokens.retry, in.tokens.timeout = 50*time.Millisecond, 300*time.Millisecond }
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
}

// The plugin's kubeconfig carries the minted token, not the installer's,
// and a new one well before the old one expires.
func TestPluginTokenMintedAndRenewed(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Second}
	n.minting(m)
	n.start(n.config())
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-") || strings.Contains(kc, "token-1") {
		t.Fatalf("kubeconfig should carry the minted token only:\n%s", kc)
	}
	// Renewed at 80% of the lifetime, before the expiry.
	_, first := m.counts()
	n.eventually("renewed token", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, fmt.Sprintf("plugin-%d", first+1)), kc
	})
	// Rotating the installer's own token and CA brings the new CA into the
	// kubeconfig, but not the installer's token.
	n.rotateToken()
	ca, err := os.ReadFile(filepath.Join(n.sa, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	n.eventually("the rotated CA in the kubeconfig", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, base64.StdEncoding.EncodeToString(ca)), kc
	})
	if kc := n.kubeconfig(); strings.Contains(kc, "token-2") {
		t.Errorf("the installer's token leaked into the plugin kubeconfig:\n%s", kc)
	}
}

// Without a token the installer is not ready and says why, and it writes
// no kubeconfig: its own token must never stand in. A failed renewal keeps
// the current token while it is valid, and only until it expires: the
// token's validity follows a fake clock, so "before" and "after" the expiry
// are the test's to say.
func TestPluginTokenMintFailure(t *testing.T) {
	n := newNode(t)
	clock := newFakeClock()
	m := &fakeMinter{ttl: time.Second, failing: true, now: clock.now}
	n.minting(m)
	n.now = clock.now
	n.start(n.config())
	n.eventually("not ready, naming the mint failure", func() (bool, string) {
		ready, why := n.in.Ready()
		return !ready && strings.Contains(why, "TokenRequest refused"), why
	})
	if kc := n.kubeconfig(); kc != "" {
		t.Fatalf("kubeconfig written without a minted token:\n%s", kc)
	}
	m.set(false, false)
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
		t.Fatalf("kubeconfig:\n%s", kc)
	}
	if ok, failed := metric(n.in.metrics.TokenMints.WithLabelValues("success")), metric(n.in.metrics.TokenMints.WithLabelValues("failure")); ok != 1 || failed < 1 {
		t.Errorf("istio_cni_plugin_token_mints_total: success %v, failure %v; want 1 and at least 1", ok, failed)
	}
	// Renewals fail from now on (the first at 80% of the second, in real
	// time), while the clock says plugin-1 is valid: the loop has taken a
	// failed renewal once a second one started. A repair of the
	// kubeconfig after it still writes plugin-1.
	m.set(true, false)
	calls, _ := m.counts()
	n.mintsStarted(m, "two failed renewals", calls+2)
	if err := os.Remove(filepath.Join(n.kc, KubeconfigName)); err != nil {
		t.Fatal(err)
	}
	n.eventually("the kubeconfig repaired with the valid plugin-1 after a failed renewal", func() (bool, string) {
		ready, why := n.in.Ready()
		kc := n.kubeconfig()
		return ready && strings.Contains(kc, "plugin-1"), fmt.Sprintf("ready %v (%s); kubeconfig:\n%s", ready, why, kc)
	})
	// Past its expiry, the next failed renewal leaves no valid token.
	clock.advance(time.Second)
	n.eventually("not ready once the token expired", func() (bool, string) {
		ready, why := n.in.Ready()
		return !ready && strings.Contains(why, "no valid token"), why
	})
}

// A mint that hangs (the API unreachable) never holds up a repair: here
// it hangs until Run ends, so a repair that waited for it would never
// come.
func TestPluginTokenHungAPIDoesNotBlockRepairs(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: 500 * time.Millisecond}
	n.minting(m)
	n.tweak = func(in *Installer) { in.tokens.retry, in.tokens.timeout = 50*time.Millisecond, time.Hour }
	n.start(n.config())
	n.waitReady()
	m.set(false, true)
	n.eventually("a renewal hanging", func() (bool, string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.inFlight == 1, fmt.Sprint(m.inFlight, " mints in flight")
	})
	calls, _ := m.counts()
	owned := filepath.Join(n.netd, "02-istio-cni.conflist")
	if err := os.Remove(owned); err != nil {
		t.Fatal(err)
	}
	n.eventually("conflist restored while the renewal hangs", func() (bool, string) {
		_, err := os.Stat(owned)
		return err == nil, fmt.Sprint(err)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight != 1 || m.calls != calls {
		t.Errorf("%d mints in flight and %d more started; want the one that hangs, alone", m.inFlight, m.calls-calls)
	}
}

// A mint that hangs is given up after the mint timeout, and retried only
// then, after the retry delay: never two at once, never a spin.
func TestPluginTokenHungMintRetriedOnceItGaveUp(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Hour, hanging: true}
	n.minting(m)
	const retry = 50 * time.Millisecond
	n.tweak = func(in *Installer) { in.tokens.retry, in.tokens.timeout = retry, 100*time.Millisecond }
	n.start(n.config())
	n.eventually("three hung mints given up", func() (bool, string) {
		done := 0
		for _, c := range m.history() {
			if !c.end.IsZero() {
				done++
			}
		}
		return done >= 3, fmt.Sprint(done, " given up")
	})
	calls := m.history()
	for i := 1; i < len(calls); i++ {
		if prev := calls[i-1]; prev.end.IsZero() || calls[i].start.Sub(prev.end) < retry {
			t.Errorf("mint %d started %v after mint %d gave up (at %v), want at least %v after", i+1,
				calls[i].start.Sub(prev.end), i, prev.end, retry)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mostInFlight != 1 {
		t.Errorf("%d mints in flight at once, want 1", m.mostInFlight)
	}
}

// renewalsPaced checks that no mint started sooner after a successful one
// than 80% of its token's lifetime: the pace of its lifetime, not a loop.
func renewalsPaced(t *testing.T, calls []mintCall, ttl time.Duration) {
	t.Helper()
	for i := 1; i < len(calls); i++ {
		if prev := calls[i-1]; prev.ok && calls[i].start.Sub(prev.start) < ttl*4/5-time.Microsecond {
			t.Errorf("mint %d started %v after mint %d minted a %v token, want at least 80%% of it", i+1, calls[i].start.Sub(prev.start), i, ttl)
		}
	}
}

// During a fight repairs are paced, but the plugin's token is renewed on
// time (it is our credential, not the file being fought over), and at the
// pace of its lifetime, not in a loop.
func TestPluginTokenRenewedDuringConflict(t *testing.T) {
	n := newNode(t)
	const ttl = time.Second
	m := &fakeMinter{ttl: ttl}
	n.minting(m)
	cfg := n.config()
	cfg.FightRepairs, cfg.FightWindow = 4, 30*time.Second
	n.start(cfg)
	n.waitReady()
	owned := filepath.Join(n.netd, "02-istio-cni.conflist")
	defer poll.Every(time.Millisecond, func() { _ = os.Remove(owned) })()
	n.eventually("conflict reported", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.Contains(why, "conflict"), why
	})
	_, serial := m.counts()
	for _, next := range []int{serial + 1, serial + 2} {
		n.eventually(fmt.Sprintf("token plugin-%d during the conflict", next), func() (bool, string) {
			kc := n.kubeconfig()
			return strings.Contains(kc, fmt.Sprintf("plugin-%d", next)), kc
		})
	}
	if ok, why := n.in.Ready(); ok || !strings.Contains(why, "conflict") {
		t.Errorf("the conflict ended while its writer went on (ready %v, %s): the renewals were not made during it", ok, why)
	}
	renewalsPaced(t, m.history(), ttl)
}

// A token the API server refused (the plugin reports it) is replaced at
// once, not at 80% of its life. The refusal gap runs by a fake clock: the
// test moves it past the gap instead of waiting for it.
func TestPluginTokenRefusedMintsAtOnce(t *testing.T) {
	n := newNode(t)
	clock := newFakeClock()
	m := &fakeMinter{ttl: time.Hour, now: clock.now}
	n.minting(m)
	n.now = clock.now
	n.start(n.config())
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
		t.Fatalf("kubeconfig:\n%s", n.kubeconfig())
	}
	clock.advance(defaultRefusedGap)
	for range 5 {
		n.in.PluginTokenRefused()
	}
	n.eventually("a new token after the refusal", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, "plugin-2"), kc
	})
}

// Refusals cost at most one mint per gap: none while a mint runs, none
// within the gap of the last one, and a burst after it one. The keeper's
// turn on a refusal (onRefusal) is driven by the test, by a fake clock
// that moves a little before each, so a mint it starts shows at once in
// the keeper's record of when the last one started.
func TestPluginTokenRefusalsMintOncePerGap(t *testing.T) {
	clock := newFakeClock()
	m := &fakeMinter{ttl: time.Hour, now: clock.now}
	p := newPluginToken(Deps{PluginToken: m.mint, Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics(), Now: clock.now}, time.Hour)
	ctx := t.Context()
	minted := func() bool {
		clock.advance(time.Nanosecond)
		before := p.started
		p.onRefusal(ctx)
		return p.started != before
	}
	p.start(ctx)
	clock.advance(p.refusedGap)
	if minted() {
		t.Fatal("a refusal started a mint while one ran")
	}
	p.done(<-p.minted)
	if !minted() {
		t.Fatal("a refusal past the gap started no mint")
	}
	p.done(<-p.minted)
	clock.advance(p.refusedGap - time.Millisecond)
	if minted() {
		t.Fatal("a refusal within the gap of the last mint started one")
	}
	clock.advance(time.Millisecond)
	burst := 0
	for range 5 {
		if minted() {
			burst++
		}
	}
	if burst != 1 {
		t.Fatalf("a burst of 5 refusals past the gap started %d mints, want 1", burst)
	}
	p.done(<-p.minted)
	if p.state.token != "plugin-3" {
		t.Errorf("token %q after three mints, want plugin-3", p.state.token)
	}
}

// boundToken is a token shaped as the API server mints one bound to a
// Node: a JWT whose claims name the node's UID.
func boundToken(serial int, nodeUID string) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims := fmt.Sprintf(`{"kubernetes.io":{"node":{"name":"node-a","uid":%q},"serviceaccount":{"name":"istio-cni-plugin"}},"serial":%d}`, nodeUID, serial)
	return enc([]byte(`{"alg":"ES256"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("sig"))
}

// A Node deleted and registered again (a new UID) revokes the plugin's
// tokens bound to it: the agent sees the new UID at its next check and
// mints at once, not at 80% of the token's life. Checks that find the same
// UID mint nothing, nor does a cache stuck on the old UID: what differs in
// the cache is read again from storage.
func TestPluginTokenReplacedWhenItsNodeReregisters(t *testing.T) {
	n := newNode(t)
	var mu sync.Mutex
	cached, stored, mints, checks := "uid-1", "uid-1", 0, 0
	n.mint = func(context.Context) (string, time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		mints++
		return boundToken(mints, stored), time.Now().Add(time.Hour), nil
	}
	n.nodeUID = func(_ context.Context, fresh bool) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		checks++
		if fresh {
			return stored, nil
		}
		return cached, nil
	}
	n.tweak = func(in *Installer) {
		in.tokens.retry, in.tokens.timeout, in.tokens.refusedGap = 50*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
		in.tokens.nodeEvery = 50 * time.Millisecond
	}
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, boundToken(1, "uid-1")) {
		t.Fatalf("kubeconfig:\n%s", kc)
	}
	checked := func(want int) {
		t.Helper()
		mu.Lock()
		from := checks
		mu.Unlock()
		n.eventually("more checks of the node", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return checks >= from+want, fmt.Sprint(checks-from, " checks")
		})
	}
	checked(3)
	mu.Lock()
	if mints != 1 {
		t.Errorf("%d mints while the node kept its UID, want 1", mints)
	}
	cached, stored = "uid-2", "uid-2"
	mu.Unlock()
	n.eventually("a token bound to the node's new UID", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, boundToken(2, "uid-2")), kc
	})
	mu.Lock()
	cached = "uid-1" // a cache behind the times
	mu.Unlock()
	checked(6) // three checks, each read twice
	mu.Lock()
	defer mu.Unlock()
	if mints != 2 {
		t.Errorf("%d mints in all, want 2: one more for the new UID, none for a stale cache", mints)
	}
}

func TestBoundNodeUID(t *testing.T) {
	for token, want := range map[string]string{
		boundToken(1, "0f0e"): "0f0e",
		"plugin-1":            "",
		"a.b.c":               "",
		"a." + base64.RawURLEncoding.EncodeToString([]byte(`{"kubernetes.io":{"pod":{"uid":"x"}}}`)) + ".c": "",
	} {
		if got := boundNodeUID(token); got != want {
			t.Errorf("boundNodeUID(%q) = %q, want %q", token, got, want)
		}
	}
}
