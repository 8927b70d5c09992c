package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRestartLeavesEverything(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s gone after a restart: %v", f, err)
		}
	}
}

func TestUninstallRemovesEverything(t *testing.T) {
	for _, mode := range []Mode{Owned, Inplace} {
		t.Run(string(mode), func(t *testing.T) {
			n := newNode(t)
			primary := filepath.Join(n.netd, "10-bridge.conflist")
			n.write(primary, bridgePrimary, 0o644)
			cfg := n.config()
			cfg.Mode = mode
			n.start(cfg)
			n.waitReady()
			if mode == Inplace && !strings.Contains(n.read(primary), "istio-cni") {
				t.Fatalf("inplace: no entry in the primary:\n%s", n.read(primary))
			}
			n.uninstall.Store(true)
			if err := n.stop(); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
				if _, err := os.Stat(f); !os.IsNotExist(err) {
					t.Errorf("%s left after uninstall: %v", f, err)
				}
			}
			after := n.read(primary)
			if strings.Contains(after, "istio-cni") || !strings.Contains(after, `"bridge"`) {
				t.Errorf("primary after uninstall:\n%s", after)
			}
			if mode == Owned && after != bridgePrimary {
				t.Error("owned mode touched the primary's file")
			}
		})
	}
}
