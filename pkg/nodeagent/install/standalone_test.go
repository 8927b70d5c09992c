package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
)

// TestStandaloneForMultus: with --chained=false the installer writes
// istio-cni's own one-plugin config into the (Multus) config directory,
// needs no primary, repairs it, and removes it at uninstall.
func TestStandaloneForMultus(t *testing.T) {
	n := newNode(t)
	cfg := n.config()
	cfg.Chained, cfg.OwnedConfigName = false, DefaultStandaloneName
	n.start(cfg)
	n.waitReady()
	path := filepath.Join(n.netd, "istio-cni.conf")
	var conf map[string]any
	if err := json.Unmarshal([]byte(n.read(path)), &conf); err != nil {
		t.Fatalf("standalone config: %v\n%s", err, n.read(path))
	}
	if conf["name"] != "istio-cni" || conf["type"] != chain.PluginType || conf["cniVersion"] != "0.3.1" ||
		conf["kubeconfig"] != "/var/run/istio-cni/"+KubeconfigName || conf["plugins"] != nil {
		t.Errorf("standalone config %v", conf)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	n.eventually("repaired", func() (bool, string) {
		ok, why := n.in.Ready()
		_, err := os.Stat(path)
		return ok && err == nil, why
	})
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(n.netd); len(left) != 0 {
		t.Errorf("left in the config dir: %v", left)
	}
}
