package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
)

const bridgeConf = `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}}`

// A config the runtime reads sorts before ours, however it is named.
func TestForeignFilesSortingFirst(t *testing.T) {
	for name, content := range map[string]string{
		".00-hidden.conflist": bridgePrimary, // runtimes read hidden names too
		"01-broken.conflist":  "{not json",   // containerd stops at it
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
			n.start(n.config())
			n.waitReady()
			n.write(filepath.Join(n.netd, name), content, 0o644)
			n.eventually("ours sorts first again", func() (bool, string) {
				ok, why := n.in.Ready()
				owned, _ := n.owned()
				return ok && owned < name, why
			})
		})
	}
}

// TestPrimaryRewrittenInPlace: a primary truncated and then written (not
// renamed into place) must not drop our copy, or pods would start on the
// bare primary.
func TestPrimaryRewrittenInPlace(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	n.write(primary, "", 0o644)
	n.eventually("not ready while the primary does not parse", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.Contains(why, "keeping"), why
	})
	if _, owned := n.owned(); !strings.Contains(owned, `"`+chain.PluginType+`"`) {
		t.Fatalf("our copy was dropped while the primary was being rewritten:\n%s", owned)
	}
	n.write(primary, strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1), 0o644)
	n.eventually("follows the rewritten primary", func() (bool, string) {
		ok, why := n.in.Ready()
		_, owned := n.owned()
		return ok && strings.Contains(owned, `"bandwidth"`), why
	})
}

// TestOwnWritesAreNoFight: primary updates make us rewrite our file; that
// is following, not fighting.
func TestOwnWritesAreNoFight(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	cfg := n.config()
	cfg.FightRepairs = 2
	n.start(cfg)
	n.waitReady()
	for i, plugin := range []string{`"bandwidth"`, `"tuning"`, `"firewall"`, `"sbr"`} {
		n.write(primary, strings.Replace(bridgePrimary, `"portmap"`, plugin, 1), 0o644)
		n.eventually("follows edit "+string(rune('1'+i)), func() (bool, string) {
			ok, why := n.in.Ready()
			_, owned := n.owned()
			return ok && strings.Contains(owned, plugin), why
		})
	}
	if metric(n.in.metrics.Conflict) != 0 {
		t.Error("primary edits were taken for a fight")
	}
}

// TestRestartOverAnEarlierRun: names and files from the previous run are
// recognised and cleaned.
func TestRestartOverAnEarlierRun(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	multus := filepath.Join(n.netd, "00-multus.conflist")
	n.write(multus, strings.Replace(bridgePrimary, "k8s-pod-network", "multus", 1), 0o644)
	n.start(n.config())
	n.waitReady()
	first, _ := n.owned()
	if err := n.stop(); err != nil { // a restart: everything stays
		t.Fatal(err)
	}
	if err := os.Remove(multus); err != nil {
		t.Fatal(err)
	}
	n.start(n.config())
	n.waitReady()
	if name, _ := n.owned(); name != "02-istio-cni.conflist" {
		t.Errorf("owned %q, want the preferred name again", name)
	}
	if _, err := os.Stat(filepath.Join(n.netd, first)); !os.IsNotExist(err) {
		t.Errorf("the earlier run's %s is still there: %v", first, err)
	}
	// Uninstall after a restart, before any primary: nothing of ours stays.
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(n.netd)
	for _, e := range entries {
		if strings.Contains(e.Name(), "istio-cni") {
			t.Errorf("%s left after uninstall", e.Name())
		}
	}
}

// TestInplaceConfPrimary: a .conf primary becomes a .conflist with our
// entry; when its agent writes the .conf again, we convert it again.
func TestInplaceConfPrimary(t *testing.T) {
	n := newNode(t)
	conf := filepath.Join(n.netd, "10-bridge.conf")
	n.write(conf, bridgeConf, 0o644)
	cfg := n.config()
	cfg.Mode = Inplace
	n.start(cfg)
	n.waitReady()
	list := filepath.Join(n.netd, "10-bridge.conflist")
	if _, err := os.Stat(conf); !os.IsNotExist(err) || !strings.Contains(n.read(list), "istio-cni") {
		t.Fatalf(".conf %v; .conflist:\n%s", err, n.read(list))
	}
	n.write(conf, bridgeConf, 0o644)
	n.eventually("the rewritten .conf is converted again", func() (bool, string) {
		_, err := os.Stat(conf)
		ok, why := n.in.Ready()
		return ok && os.IsNotExist(err), why
	})
}

// TestStartRemovesCrashedWritesTemps: temp files of writes a crash cut short
// are cleaned at start-up; other files are not.
func TestStartRemovesCrashedWritesTemps(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	ours := []string{filepath.Join(n.bin, "."+PluginBinary+".0123456789abcdef.tmp"), filepath.Join(n.netd, ".02-istio-cni.conflist.0123456789abcdef.tmp")}
	theirs := filepath.Join(n.netd, ".calico.tmp")
	for _, f := range append(ours, theirs) {
		n.write(f, "partial", 0o644)
	}
	n.start(n.config())
	n.waitReady()
	for _, f := range ours {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", f, err)
		}
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("a foreign file was removed: %v", err)
	}
}
