package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// An agent orphaned by `helm uninstall --cascade=orphan` is told istio-cni
// is gone while it runs (pkg/nodeagent/lifecycle): it uninstalls at once, repairs
// nothing from then on, and stays alive and not ready until it is stopped.
func TestUninstallNowRemovesAndHoldsNothing(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.tweak = func(in *Installer) { in.reinstallEvery = 20 * time.Millisecond }
	n.start(n.config())
	n.waitReady()
	n.in.UninstallNow("ServiceAccount istio-cni/istio-cni is deleted and the API now refuses the agent")
	n.eventually("uninstalled, not ready", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.HasPrefix(why, UninstalledReason) && !exists(filepath.Join(n.netd, "02-istio-cni.conflist")), why
	})
	// Nothing is repaired any more: a config written now stays as it is,
	// while the agent goes on asking whether istio-cni is back (it asks
	// only once it uninstalled; a loop that still repaired never would).
	other := filepath.Join(n.netd, "01-other.conflist")
	n.write(other, bridgePrimary, 0o644)
	n.reinstallChecked("two checks after the write", n.reinstallChecks.Load()+2)
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
		if exists(f) {
			t.Errorf("%s after the uninstall", f)
		}
	}
	if got := n.read(other); got != bridgePrimary {
		t.Errorf("a config written after the uninstall was changed:\n%s", got)
	}
	n.uninstall.Store(false)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(n.netd, "02-istio-cni.conflist")) {
		t.Error("the shutdown installed again")
	}
}

// reinstallChecked waits until Deps.Reinstalled was asked at least checks
// times, or Run returned.
func (n *node) reinstallChecked(what string, checks int64) {
	n.t.Helper()
	n.eventually(what, func() (bool, string) {
		return n.reinstallChecks.Load() >= checks || len(n.done) > 0, fmt.Sprint(n.reinstallChecks.Load(), " checks")
	})
}

// An orphan that uninstalled while running is adopted by a new install
// (same template: the new DaemonSet keeps the pod): once the API shows
// istio-cni back and accepts it, it exits so kubelet restarts it to
// install, rather than idling on a node the new install counts as served.
func TestUninstalledWhileRunningExitsWhenReinstalled(t *testing.T) {
	n := newNode(t)
	n.tweak = func(in *Installer) { in.reinstallEvery = 20 * time.Millisecond }
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	n.in.UninstallNow("ServiceAccount istio-cni/istio-cni is deleted and the API now refuses the agent")
	n.eventually("uninstalled", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.HasPrefix(why, UninstalledReason), why
	})
	n.reinstallChecked("three checks saying no", 3)
	select {
	case err := <-n.done:
		n.cancel = nil // Run returned: nothing for the cleanup to stop
		t.Fatalf("exited before istio-cni was back: %v", err)
	default:
	}
	n.reinstalled.Store(true)
	select {
	case err := <-n.done:
		n.cancel = nil
		if !errors.Is(err, ErrReinstalled) {
			t.Errorf("Run returned %v, want ErrReinstalled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still idle 10s after istio-cni was back")
	}
}

// A restarted orphan (its container after a crash, its node after a
// reboot) finds its own credentials refused: it installs nothing, says
// why, and installs once the API accepts it again (a new install adopted
// it).
func TestRefusedAtStartInstallsNothing(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Hour}
	m.refuse = apierrors.NewUnauthorized("the token's ServiceAccount is gone")
	n.minting(m)
	n.start(n.config())
	n.eventually("holding, not ready", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.HasPrefix(why, RefusedReason), why
	})
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
		if exists(f) {
			t.Errorf("%s written while the API refuses the agent", f)
		}
	}
	m.mu.Lock()
	m.refuse = nil
	m.mu.Unlock()
	n.waitReady()
	// And a plain stop after holding never runs the uninstall check.
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
}

// A restarted orphan whose node still holds what an earlier run installed
// (it crashed before it could uninstall): while the API refuses it, that
// config keeps failing every pod on the node. Before the hold has lasted
// the plugin's token lifetime, an earlier run's token may still work: the
// files stay. Once it has, none can: the files go, and the hold goes on
// until the API accepts the agent again. The lifetime runs by a fake
// clock, so "before" and "after" are the test's to say.
func TestHeldPastTheTokenLifetimeClearsTheNode(t *testing.T) {
	n := newNode(t)
	m := &fakeMinter{ttl: time.Hour}
	n.minting(m)
	n.start(n.config())
	n.waitReady()
	if err := n.stop(); err != nil { // a restart: the files stay
		t.Fatal(err)
	}
	files := []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")}
	left := func() int {
		left := 0
		for _, f := range files {
			if exists(f) {
				left++
			}
		}
		return left
	}
	if left() != len(files) {
		t.Fatalf("%d of %v left after a restart", left(), files)
	}
	clock := newFakeClock()
	m.mu.Lock()
	m.refuse = apierrors.NewUnauthorized("the token's ServiceAccount is gone")
	m.now = clock.now
	m.mu.Unlock()
	n.now = clock.now
	cfg := n.config()
	cfg.PluginTokenTTL = 10 * time.Minute
	calls, _ := m.counts()
	n.start(cfg)
	// The first refusal starts the hold; the loop has taken the second
	// once the fourth mint started.
	n.mintsStarted(m, "refused mints during the hold", calls+4)
	if ok, why := n.in.Ready(); ok || !strings.HasPrefix(why, RefusedReason) {
		t.Fatalf("not holding: ready %v, %s", ok, why)
	}
	if left() != len(files) {
		t.Fatalf("%d of %d files left before the token lifetime ended, want all", left(), len(files))
	}
	clock.advance(cfg.PluginTokenTTL)
	n.eventually("the earlier run's files removed, still holding", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.HasPrefix(why, RefusedReason) && left() == 0, fmt.Sprint(why, "; files left: ", left())
	})
	m.mu.Lock()
	m.refuse = nil
	m.mu.Unlock()
	n.waitReady()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
