package install

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/poll"
)

// fakeMinter hands out plugin-1, plugin-2, ... each valid for ttl; it fails
// while failing is set, and blocks until its context ends while hanging is.
type fakeMinter struct {
	mu               sync.Mutex
	ttl              time.Duration
	calls, serial    int
	failing, hanging bool
	refuse           error // returned while set, as the API server refuses
}

func (f *fakeMinter) mint(ctx context.Context) (string, time.Time, error) {
	f.mu.Lock()
	f.calls++
	hang, fail, refuse := f.hanging, f.failing, f.refuse
	f.mu.Unlock()
	if refuse != nil {
		return "", time.Time{}, refuse
	}
	if hang {
		<-ctx.Done()
		return "", time.Time{}, ctx.Err()
	}
	if fail {
		return "", time.Time{}, errors.New("TokenRequest refused")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.serial++
	return fmt.Sprintf("plugin-%d", f.serial), time.Now().Add(f.ttl), nil
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
// the current token while it is valid.
func TestPluginTokenMintFailure(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Second, failing: true}
	n.minting(m)
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
	// Renewals fail from now on: plugin-1 stays until it expires (1 s),
	// then the installer is no longer ready.
	m.set(true, false)
	deadline := time.Now().Add(700 * time.Millisecond)
	for time.Now().Before(deadline) {
		if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
			t.Fatalf("kubeconfig lost its valid token:\n%s", kc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.eventually("not ready once the token expired", func() (bool, string) {
		ready, why := n.in.Ready()
		return !ready && strings.Contains(why, "no valid token"), why
	})
}

// A mint that hangs (the API unreachable) never holds up a repair, and
// retries stay paced.
func TestPluginTokenHungAPIDoesNotBlockRepairs(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: 500 * time.Millisecond}
	n.minting(m)
	// A hang far longer than any repair: a repair that waited for it would
	// take seconds, one that does not takes milliseconds, whatever the load.
	const hang = 5 * time.Second
	n.tweak = func(in *Installer) { in.tokens.retry, in.tokens.timeout = 50*time.Millisecond, hang }
	n.start(n.config())
	n.waitReady()
	calls, _ := m.counts()
	m.set(false, true)
	n.eventually("a renewal hanging", func() (bool, string) {
		now, _ := m.counts()
		return now > calls, fmt.Sprint(now, " mints")
	})
	owned := filepath.Join(n.netd, "02-istio-cni.conflist")
	if err := os.Remove(owned); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.eventually("conflist restored", func() (bool, string) {
		_, err := os.Stat(owned)
		return err == nil, fmt.Sprint(err)
	})
	if d := time.Since(start); d > hang/2 {
		t.Errorf("conflist restored after %v, behind a hanging mint (%v)", d, hang)
	}
	// A hanging mint is retried only once it gave up: not a spin.
	before, _ := m.counts()
	time.Sleep(time.Second)
	if calls, _ := m.counts(); calls-before > 5 {
		t.Errorf("%d mints in a second", calls-before)
	}
}

// During a fight repairs are paced, but the plugin's token is renewed on
// time (it is our credential, not the file being fought over), and at the
// pace of its lifetime, not in a loop.
func TestPluginTokenRenewedDuringConflict(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Second}
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
	calls, serial := m.counts()
	n.eventually("token renewed during the conflict", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, fmt.Sprintf("plugin-%d", serial+1)), kc
	})
	time.Sleep(time.Second)
	if now, _ := m.counts(); now-calls > 4 {
		t.Errorf("%d mints in about 2 s of a 1 s token's life", now-calls)
	}
}

// A token the API server refused (the plugin reports it) is replaced at
// once, not at 80% of its life; refusals in a burst cost one mint.
func TestPluginTokenRefusedMintsAtOnce(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Hour}
	n.minting(m)
	tweak := n.tweak
	n.tweak = func(in *Installer) { tweak(in); in.tokens.refusedGap = 200 * time.Millisecond }
	n.start(n.config())
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
		t.Fatalf("kubeconfig:\n%s", n.kubeconfig())
	}
	time.Sleep(250 * time.Millisecond)
	for range 5 {
		n.in.PluginTokenRefused()
	}
	n.eventually("a new token after the refusal", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, "plugin-2"), kc
	})
	time.Sleep(100 * time.Millisecond)
	if calls, _ := m.counts(); calls != 2 {
		t.Errorf("%d mints for one burst of refusals after the first, want 2 in all", calls)
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
		in.nodeEvery = 50 * time.Millisecond
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
