package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
)

// upstreamBridge is a primary into which upstream Istio's installer put its
// entry (chained, in place), as Istio 1.24+ writes it.
const upstreamBridge = `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[
 {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},
 {"type":"istio-cni","name":"istio-cni","plugin_log_level":"info","cni_agent_run_dir":"/var/run/istio-cni",
  "ambient_enabled":false,"exclude_namespaces":["kube-system"],"pod_namespace":"istio-system"}]}`

// upstreamEntryJSON is upstream's entry alone, as its installer appends it.
const upstreamEntryJSON = `{"type":"istio-cni","name":"istio-cni","plugin_log_level":"info","cni_agent_run_dir":"/var/run/istio-cni","ambient_enabled":false,"exclude_namespaces":["kube-system"],"pod_namespace":"istio-system"}`

// upstreamNode is a node upstream's installer manages: its entry in the
// primary, its binary and kubeconfig under its names.
func upstreamNode(t *testing.T) (n *node, primary, bin, kc string) {
	n = newNode(t)
	primary = filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, upstreamBridge, 0o644)
	bin, kc = filepath.Join(n.bin, LegacyPluginBinary), filepath.Join(n.kc, LegacyKubeconfigName)
	n.write(bin, "upstream's binary", 0o755)
	if err := os.MkdirAll(n.kc, 0o700); err != nil {
		t.Fatal(err)
	}
	n.write(kc, upstreamKubeconfig, 0o600)
	return n, primary, bin, kc
}

// types is a config's plugin types in order, and whether upstream's
// entry is among them.
func types(t *testing.T, data string) string {
	t.Helper()
	var c struct{ Plugins []struct{ Type string } }
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return "not a list: " + err.Error()
	}
	var out []string
	for _, p := range c.Plugins {
		out = append(out, p.Type)
	}
	if chain.UpstreamEntry([]byte(data)) {
		out = append(out, "(upstream's in it)")
	}
	return strings.Join(out, " ")
}

// TestBesideUpstreamInstall: the switch from upstream Istio's istio-cni.
// On a node upstream's installer manages, this one installs at once and
// is ready: its own conflist sorts first and chains its own type, without
// upstream's entry (upstream's uninstall takes that out of the primary,
// then deletes its binary); upstream's files stay as they are, under their
// own names; it says once that both are installed. Then upstream's
// uninstall, in its order (its entry, its kubeconfig, its binary), changes
// nothing of ours.
func TestBesideUpstreamInstall(t *testing.T) {
	n, primary, bin, kc := upstreamNode(t)
	log := &fightLog{}
	n.notify = log
	n.start(n.config())
	n.waitReady()
	name, data := n.owned()
	if name != "02-istio-cni.conflist" || types(t, data) != "bridge "+chain.PluginType {
		t.Errorf("our conflist %s: %s, want bridge then ours, no upstream entry:\n%s", name, types(t, data), data)
	}
	for path, want := range map[string]string{primary: upstreamBridge, bin: "upstream's binary", kc: upstreamKubeconfig} {
		if got := n.read(path); got != want {
			t.Errorf("%s changed beside upstream's installer:\n%s", path, got)
		}
	}
	if n.read(filepath.Join(n.bin, PluginBinary)) != n.read(filepath.Join(n.src, PluginBinary)) || n.read(filepath.Join(n.kc, KubeconfigName)) == "" {
		t.Error("our binary or kubeconfig is missing")
	}
	if log.mu.Lock(); len(log.other) != 1 || log.other[0] != "10-bridge.conflist" {
		t.Errorf("notified %v, want 10-bridge.conflist once", log.other)
	}
	log.mu.Unlock()
	// Upstream's uninstall.
	n.write(primary, bridgePrimary, 0o644)
	for _, f := range []string{kc, bin} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	// A change of the primary after them: once our copy follows it, every
	// event before was handled.
	n.write(primary, strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1), 0o644)
	n.eventually("our copy following the primary", func() (bool, string) {
		_, now := n.owned()
		return types(t, now) == "bridge bandwidth "+chain.PluginType, types(t, now)
	})
	n.waitReady()
	if n.read(filepath.Join(n.bin, PluginBinary)) != n.read(filepath.Join(n.src, PluginBinary)) || n.kubeconfig() == "" {
		t.Error("upstream's uninstall took our binary or kubeconfig")
	}
}

// TestUpstreamChainsIntoOurs: the switch back. Upstream's installer,
// started after this one with no cniConfFileName, chains into the first
// config, ours: its entry stays there, after ours (no fight: our repairs
// would have it write it again, forever). Our uninstall then takes out
// only our entry, leaves upstream's files, and removes no config that
// holds upstream's entry, so the runtime never runs a chain without one.
func TestUpstreamChainsIntoOurs(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	log := &fightLog{}
	n.notify = log
	n.start(n.config())
	n.waitReady()
	name, data := n.owned()
	// Upstream's install: binary, kubeconfig, then its entry appended to
	// the first config. A change of the primary after it shows when the
	// installer has seen it (its copy follows).
	bin, kc := filepath.Join(n.bin, LegacyPluginBinary), filepath.Join(n.kc, LegacyKubeconfigName)
	n.write(bin, "upstream's binary", 0o755)
	n.write(kc, upstreamKubeconfig, 0o600)
	// Upstream's installer inserts its entry again whenever it finds it
	// missing (its watch): so does the test, as the installer might write
	// from a view it took before.
	inserting := func(want string) func() (bool, string) {
		return func() (bool, string) {
			_, now := n.owned()
			if !chain.UpstreamEntry([]byte(now)) {
				writeAtomic(t, filepath.Join(n.netd, name), withUpstreamEntry(now))
				return false, "inserted again: " + types(t, now)
			}
			return types(t, now) == want, types(t, now)
		}
	}
	writeAtomic(t, filepath.Join(n.netd, name), withUpstreamEntry(data))
	bandwidth := strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1)
	n.write(primary, bandwidth, 0o644)
	n.eventually("upstream's entry kept after ours", inserting("bridge bandwidth "+chain.PluginType+" istio-cni (upstream's in it)"))
	n.waitReady()
	if fights, _ := log.counts(); fights != 0 {
		t.Errorf("%d fights reported with upstream's installer", fights)
	}
	// Its binary gone with its entry still in our file (its shutdown cut
	// short, or our write from a view taken before its cleanup): the entry
	// would fail every pod, and goes.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	n.eventually("upstream's entry dropped with its binary", func() (bool, string) {
		_, now := n.owned()
		return types(t, now) == "bridge bandwidth "+chain.PluginType, types(t, now)
	})
	n.write(bin, "upstream's binary", 0o755)
	n.write(primary, bridgePrimary, 0o644)
	n.eventually("upstream's entry kept again", inserting("bridge portmap "+chain.PluginType+" istio-cni (upstream's in it)"))
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	if got := n.read(filepath.Join(n.netd, name)); types(t, got) != "bridge portmap istio-cni (upstream's in it)" {
		t.Errorf("%s after our uninstall: %s, want the primary's plugins and upstream's entry:\n%s", name, types(t, got), got)
	}
	for path, want := range map[string]string{primary: bridgePrimary, bin: "upstream's binary", kc: upstreamKubeconfig} {
		if got := n.read(path); got != want {
			t.Errorf("%s after our uninstall:\n%s\nwant it untouched", path, got)
		}
	}
	for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName)} {
		if exists(f) {
			t.Errorf("%s left after our uninstall", f)
		}
	}
}

// TestEarlierReleaseFiles: rolled forward from a release that installed
// under upstream's names, the installer chains its own type, and keeps
// that release's shim and kubeconfig while it runs (a runtime that tears
// a sandbox down with the chain it set it up with, CRI-O's or Multus'
// cached configs, runs the old shim at the pod's DEL, however late). Its
// uninstall removes them: ours (a build of this module, our context).
func TestEarlierReleaseFiles(t *testing.T) {
	n := newNode(t)
	primary := filepath.Join(n.netd, "10-bridge.conflist")
	n.write(primary, bridgePrimary, 0o644)
	legacyOwned := strings.TrimSuffix(strings.TrimSpace(bridgePrimary), "]}") +
		`,{"type":"istio-cni","kubeconfig":"/var/run/istio-cni/istio-cni-kubeconfig","exclude_namespaces":[]}]}`
	n.write(filepath.Join(n.netd, "02-istio-cni.conflist"), legacyOwned, 0o644)
	// The earlier release's shim: a build of this module (this test's
	// own binary stands in).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, kc := filepath.Join(n.bin, LegacyPluginBinary), filepath.Join(n.kc, LegacyKubeconfigName)
	if err := os.Link(self, bin); err != nil {
		t.Skip("cannot link the test binary:", err)
	}
	n.start(n.config())
	n.waitReady()
	if _, data := n.owned(); types(t, data) != "bridge portmap "+chain.PluginType {
		t.Errorf("our conflist: %s, want the earlier release's entry replaced", types(t, data))
	}
	n.write(kc, n.kubeconfig(), 0o600) // the earlier release's, our context
	// A change of the primary handled: they stay.
	n.write(primary, strings.Replace(bridgePrimary, `"portmap"`, `"bandwidth"`, 1), 0o644)
	n.eventually("our copy following the primary", func() (bool, string) {
		_, now := n.owned()
		return types(t, now) == "bridge bandwidth "+chain.PluginType, types(t, now)
	})
	if !exists(bin) || !exists(kc) {
		t.Error("the earlier release's shim or kubeconfig went while the installer runs")
	}
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bin, kc, filepath.Join(n.bin, PluginBinary), filepath.Join(n.kc, KubeconfigName)} {
		if exists(f) {
			t.Errorf("%s left after the uninstall", f)
		}
	}
}

// withUpstreamEntry is a conflist with upstream's entry appended, as its
// installer inserts it.
func withUpstreamEntry(data string) string {
	var list map[string]any
	if err := json.Unmarshal([]byte(data), &list); err != nil {
		return "not a list: " + err.Error()
	}
	var entry any
	_ = json.Unmarshal([]byte(upstreamEntryJSON), &entry)
	list["plugins"] = append(list["plugins"].([]any), entry)
	out, _ := json.Marshal(list)
	return string(out)
}

// writeAtomic writes a config as upstream's installer does (its
// file.AtomicWrite): a temporary file renamed over path.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".upstream.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
