package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
	if conf["name"] != "istio-cni" || conf["type"] != "istio-cni" || conf["cniVersion"] != "0.3.1" ||
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

// upstreamBridge is a primary into which upstream Istio's installer put its
// entry (chained, in place), as Istio 1.24+ writes it.
const upstreamBridge = `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[
 {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},
 {"type":"istio-cni","name":"istio-cni","plugin_log_level":"info","cni_agent_run_dir":"/var/run/istio-cni",
  "ambient_enabled":false,"exclude_namespaces":["kube-system"],"pod_namespace":"istio-system"}]}`

// TestUpstreamInstallIsNotFought: on a node where upstream Istio's
// installer manages istio-cni (its entry in the primary, its binary and
// kubeconfig at the same paths), this installer writes nothing, is not
// ready and says so once; once upstream's is uninstalled (its entry, binary
// and kubeconfig removed), it installs: the documented migration.
func TestUpstreamInstallIsNotFought(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, upstreamBridge, 0o644)
	n.write(filepath.Join(n.bin, PluginBinary), "upstream's binary", 0o755)
	if err := os.MkdirAll(n.kc, 0o700); err != nil {
		t.Fatal(err)
	}
	n.write(filepath.Join(n.kc, KubeconfigName), "upstream's kubeconfig", 0o600)
	log := &fightLog{}
	n.notify = log
	n.start(n.config())
	n.eventually("not ready, naming upstream", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && why == OtherInstallerReason+" (upstream Istio's entry in 10-bridge.conflist): uninstall it to migrate", why
	})
	// Touch the directory: still nothing written, still said once.
	n.write(filepath.Join(n.netd, "99-other.conflist"), bridgePrimary, 0o644)
	n.eventually("the event handled", func() (bool, string) { ok, why := n.in.Ready(); return !ok, why })
	for path, want := range map[string]string{primary: upstreamBridge, filepath.Join(n.bin, PluginBinary): "upstream's binary",
		filepath.Join(n.kc, KubeconfigName): "upstream's kubeconfig"} {
		if got := n.read(path); got != want {
			t.Errorf("%s changed while upstream's installer manages the node:\n%s", path, got)
		}
	}
	if _, err := os.Stat(filepath.Join(n.netd, "02-istio-cni.conflist")); !os.IsNotExist(err) {
		t.Errorf("an owned conflist was written: %v", err)
	}
	if log.mu.Lock(); len(log.other) != 1 || log.other[0] != "10-bridge.conflist" {
		t.Errorf("notified %v, want 10-bridge.conflist once", log.other)
	}
	log.mu.Unlock()
	// Upstream's uninstall: its entry out of the primary first, then its
	// binary and kubeconfig, which may by then be this installer's: those
	// are repaired at once.
	n.write(primary, bridgePrimary, 0o644)
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName)} {
		_ = os.Remove(f)
	}
	n.eventually("installed after the migration", func() (bool, string) {
		ok, why := n.in.Ready()
		bin := n.read(filepath.Join(n.bin, PluginBinary))
		return ok && bin == n.read(filepath.Join(n.src, PluginBinary)) && n.kubeconfig() != "", why
	})
}
