package install

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMinter hands out plugin-1, plugin-2, ... each valid for ttl, or fails
// while failing is set.
type fakeMinter struct {
	mu      sync.Mutex
	ttl     time.Duration
	serial  int
	failing bool
}

func (f *fakeMinter) mint(context.Context) (string, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return "", time.Time{}, errors.New("TokenRequest refused")
	}
	f.serial++
	return fmt.Sprintf("plugin-%d", f.serial), time.Now().Add(f.ttl), nil
}

func (f *fakeMinter) setFailing(v bool) {
	f.mu.Lock()
	f.failing = v
	f.mu.Unlock()
}

func (n *node) kubeconfig() string { return n.read(filepath.Join(n.kc, KubeconfigName)) }

// The plugin's kubeconfig carries the minted token, not the installer's,
// and a new one well before the old one expires.
func TestPluginTokenMintedAndRenewed(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: 500 * time.Millisecond}
	n.mint = m.mint
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") || strings.Contains(kc, "token-1") {
		t.Fatalf("kubeconfig should carry the minted token only:\n%s", kc)
	}
	// Renewed at 80% of the lifetime: 400 ms in, before the 500 ms expiry.
	n.eventually("renewed token", func() (bool, string) {
		kc := n.kubeconfig()
		return strings.Contains(kc, "plugin-2"), kc
	})
	// Rotating the installer's own token does not replace the plugin's.
	n.rotateToken()
	if kc := n.kubeconfig(); strings.Contains(kc, "token-2") {
		t.Errorf("installer token leaked into the plugin kubeconfig:\n%s", kc)
	}
}

// A failed renewal keeps the current, still valid token and retries; with
// no valid token at all the installer is not ready and says why.
func TestPluginTokenMintFailure(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Hour, failing: true}
	n.mint = m.mint
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.eventually("not ready, naming the mint failure", func() (bool, string) {
		ready, why := n.in.Ready()
		return !ready && strings.Contains(why, "TokenRequest refused"), why
	})
	// No kubeconfig without the plugin's token: the installer's own must
	// never stand in for it.
	if kc := n.kubeconfig(); kc != "" {
		t.Fatalf("kubeconfig written without a minted token:\n%s", kc)
	}
	m.setFailing(false)
	// The retry is 10 s away; a token rotation triggers a reconcile sooner.
	n.rotateToken()
	n.waitReady()
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
		t.Fatalf("kubeconfig:\n%s", kc)
	}

	// Renewal due, the API refuses: the current token stays in use. (The
	// loop is stopped first: the test drives reconcile itself.)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	m.setFailing(true)
	n.in.pluginTok.refreshAt = time.Now().Add(-time.Second)
	n.in.reconcile(trigger{reason: reasonPluginToken, at: time.Now()})
	if ready, why := n.in.Ready(); !ready {
		t.Errorf("not ready with a valid token: %s", why)
	}
	if kc := n.kubeconfig(); !strings.Contains(kc, "plugin-1") {
		t.Errorf("kubeconfig lost its valid token:\n%s", kc)
	}
	if d := time.Until(n.in.pluginTok.refreshAt); d <= 0 || d > mintRetry {
		t.Errorf("retry in %v, want within %v", d, mintRetry)
	}
}
