package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
)

func TestInstallFreshNode(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o600)
	n.start(n.config())
	n.waitReady()
	for _, name := range PluginBinaries {
		if got, want := n.read(filepath.Join(n.bin, name)), n.read(filepath.Join(n.src, name)); got != want {
			t.Errorf("binary %s %q, want %q", name, got, want)
		}
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(n.bin, PluginBinary):             0o755,
		filepath.Join(n.bin, FullBinary):               0o755,
		filepath.Join(n.bin, LookupBinary):             0o755,
		filepath.Join(n.kc, KubeconfigName):            0o600,
		filepath.Join(n.netd, "02-istio-cni.conflist"): 0o600,
	} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v, want %v", path, err, st.Mode().Perm(), mode)
		}
	}
	if kc := n.read(filepath.Join(n.kc, KubeconfigName)); !strings.Contains(kc, "token-1") || !strings.Contains(kc, "https://10.96.0.1:443") {
		t.Errorf("kubeconfig:\n%s", kc)
	}
	name, owned := n.owned()
	if name != "02-istio-cni.conflist" || !strings.Contains(owned, `"bridge"`) || !strings.Contains(owned, `"`+chain.PluginType+`"`) ||
		!strings.Contains(owned, `"io.kubernetes.cri.pod-annotations": true`) {
		t.Errorf("owned conflist %s:\n%s", name, owned)
	}
	if metric(n.in.metrics.Ready) != 1 {
		t.Error("ready gauge not 1")
	}
	if ok := metric(n.in.metrics.Installs.WithLabelValues(InstallSuccess)); ok != 1 {
		t.Errorf("upstream's istio_cni_installs_total{result=SUCCESS} %v after the install, want 1", ok)
	}
}

func TestNoPrimaryYetWaits(t *testing.T) {
	n := newNode(t)
	n.start(n.config())
	n.eventually("not ready without a primary", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.Contains(why, "no"), why
	})
	if f := metric(n.in.metrics.Installs.WithLabelValues(InstallConfigFailure)); f < 1 {
		t.Errorf("upstream's istio_cni_installs_total{result=CREATE_CNI_CONFIG_FAILURE} %v with no primary, want at least 1", f)
	}
	if st := metric(n.in.metrics.StartTime); st < float64(time.Now().Add(-time.Minute).Unix()) || st > float64(time.Now().Unix()+1) {
		t.Errorf("istio_cni_agent_start_time_seconds %v, want the installer's start, now", st)
	}
	if s := metric(n.in.metrics.ReadySeconds); s != 0 {
		t.Errorf("istio_cni_install_ready_seconds %v before the first readiness, want 0", s)
	}
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	n.waitReady()
	first := metric(n.in.metrics.ReadySeconds)
	if first <= 0 {
		t.Fatalf("istio_cni_install_ready_seconds %v after the first readiness, want the time it took", first)
	}
	// It is the time to the first readiness: losing and regaining it later
	// does not move it.
	if err := os.Remove(primary); err != nil {
		t.Fatal(err)
	}
	n.eventually("not ready once the primary is gone", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok, why
	})
	n.write(primary, bridgePrimary, 0o644)
	n.waitReady()
	if again := metric(n.in.metrics.ReadySeconds); again != first {
		t.Errorf("istio_cni_install_ready_seconds %v after readiness came back, want the first %v", again, first)
	}
}

func TestFollowsPrimaryRewrite(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	n.write(primary, strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1), 0o644)
	n.eventually("owned follows the primary", func() (bool, string) {
		_, owned := n.owned()
		return strings.Contains(owned, `"bandwidth"`) && !strings.Contains(owned, `"portmap"`), owned
	})
	n.waitReady()
}

func TestRestoresDeletedOrChangedFiles(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	name, want := n.owned()
	for what, undo := range map[string]func(){
		"conflist deleted":   func() { _ = os.Remove(filepath.Join(n.netd, name)) },
		"conflist edited":    func() { n.write(filepath.Join(n.netd, name), bridgePrimary, 0o644) },
		"kubeconfig deleted": func() { _ = os.Remove(filepath.Join(n.kc, KubeconfigName)) },
		"binary replaced":    func() { n.write(filepath.Join(n.bin, PluginBinary), "stale", 0o755) },
		"helper deleted":     func() { _ = os.Remove(filepath.Join(n.bin, LookupBinary)) },
		"full plugin edited": func() { n.write(filepath.Join(n.bin, FullBinary), "stale", 0o755) },
	} {
		undo()
		n.eventually(what+": repaired", func() (bool, string) {
			_, owned := n.owned()
			bin := n.read(filepath.Join(n.bin, PluginBinary))
			helper := n.read(filepath.Join(n.bin, LookupBinary))
			full := n.read(filepath.Join(n.bin, FullBinary))
			kc := n.read(filepath.Join(n.kc, KubeconfigName))
			return owned == want && strings.Contains(bin, "plugin v1") && strings.Contains(helper, "lookup v1") && strings.Contains(full, "full plugin v1") && kc != "", owned
		})
	}
	n.waitReady()
}

func TestTakesPriorityBackFromAForeignConfig(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	foreign := strings.Replace(bridgePrimary, "k8s-pod-network", "multus", 1)
	n.write(filepath.Join(n.netd, "00-multus.conflist"), foreign, 0o644)
	n.eventually("our conflist sorts before 00-multus.conflist", func() (bool, string) {
		name, owned := n.owned()
		ok, why := n.in.Ready()
		return ok && name < "00-multus.conflist" && strings.Contains(owned, `"multus"`), name + " " + why
	})
	if _, err := os.Stat(filepath.Join(n.netd, "02-istio-cni.conflist")); !os.IsNotExist(err) {
		t.Errorf("the old owned conflist is still there: %v", err)
	}
	if metric(n.in.metrics.Preemptions) != 1 {
		t.Errorf("preemptions %v, want 1", metric(n.in.metrics.Preemptions))
	}
}

func TestTokenRotation(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	token := n.rotateToken()
	n.eventually("kubeconfig has the rotated token", func() (bool, string) {
		kc := n.read(filepath.Join(n.kc, KubeconfigName))
		return strings.Contains(kc, token), kc
	})
}

func TestPlantedSymlinkIsNotFollowed(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	victim := filepath.Join(t.TempDir(), "victim")
	n.write(victim, "precious", 0o644)
	for _, link := range []string{filepath.Join(n.netd, "02-istio-cni.conflist"), filepath.Join(n.bin, PluginBinary)} {
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
	}
	n.start(n.config())
	n.waitReady()
	if got := n.read(victim); got != "precious" {
		t.Fatalf("a write went through a planted symlink: victim now %q", got)
	}
	if st, _ := os.Lstat(filepath.Join(n.netd, "02-istio-cni.conflist")); st == nil || !st.Mode().IsRegular() {
		t.Error("the owned conflist is not a regular file")
	}
}

// TestPrimaryRemoved: a copy of a primary CNI that was removed must not keep
// pods on it.
func TestPrimaryRemoved(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	if err := os.Remove(primary); err != nil {
		t.Fatal(err)
	}
	n.eventually("our copy removed, not ready", func() (bool, string) {
		_, err := os.Stat(filepath.Join(n.netd, "02-istio-cni.conflist"))
		ok, why := n.in.Ready()
		return os.IsNotExist(err) && !ok, why
	})
	n.write(primary, bridgePrimary, 0o644)
	n.waitReady()
}

// A named primary (upstream's cniConfFileName): the owned conflist copies
// that one, not the first in the directory. While it is missing the node
// is not left unchained: the first valid config is copied meanwhile.
func TestNamedPrimary(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "05-other.conflist"), strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1), 0o644)
	cfg := n.config()
	cfg.PrimaryConfigName = "10-bridge.conflist"
	n.start(cfg)
	n.waitReady()
	if _, owned := n.owned(); !strings.Contains(owned, `"bandwidth"`) {
		t.Errorf("while the named primary is missing, want a copy of the first valid config:\n%s", owned)
	}
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.eventually("a copy of the named primary, sorting first", func() (bool, string) {
		name, owned := n.owned()
		return name < "05-other.conflist" && strings.Contains(owned, `"portmap"`) && !strings.Contains(owned, `"bandwidth"`), name + ": " + owned
	})
}

// An image without the API lookup helper (a custom image, a wrong
// PLUGIN_SOURCE) must not get the conflist written: a config chaining a
// plugin the node lacks fails every pod start there. The failure names
// the setting; once the binaries are in place, the conflist follows.
func TestNoConflistWithoutTheBinaries(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	helper := n.read(filepath.Join(n.src, LookupBinary))
	if err := os.Remove(filepath.Join(n.src, LookupBinary)); err != nil {
		t.Fatal(err)
	}
	n.start(n.config())
	n.eventually("not ready, naming PLUGIN_SOURCE", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.Contains(why, "PLUGIN_SOURCE "+n.src) && strings.Contains(why, "not chaining istio-cni"), why
	})
	if _, err := os.Stat(filepath.Join(n.netd, "02-istio-cni.conflist")); !os.IsNotExist(err) {
		t.Fatalf("the conflist was written without the binaries: %v", err)
	}
	// The helper arrives (here by hand): the binary's trigger brings the
	// conflist, which failed before, along.
	n.write(filepath.Join(n.src, LookupBinary), helper, 0o755)
	n.write(filepath.Join(n.bin, LookupBinary), "stale", 0o755)
	n.waitReady()
}
