package install

import (
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
	n.start(n.config())
	n.waitReady()
	n.in.UninstallNow("ServiceAccount istio-cni/istio-cni is deleted and the API now refuses the agent")
	n.eventually("uninstalled, not ready", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.HasPrefix(why, UninstalledReason) && !exists(filepath.Join(n.netd, "02-istio-cni.conflist")), why
	})
	// Nothing is repaired any more: a config written now stays as it is.
	n.write(filepath.Join(n.netd, "01-other.conflist"), bridgePrimary, 0o644)
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
		if exists(f) {
			t.Errorf("%s after the uninstall", f)
		}
	}
	n.uninstall.Store(false)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(n.netd, "02-istio-cni.conflist")) {
		t.Error("the shutdown installed again")
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

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
