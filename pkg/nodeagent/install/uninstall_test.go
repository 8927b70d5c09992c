package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/applied"
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
			for _, f := range []string{filepath.Join(n.bin, PluginBinary), filepath.Join(n.bin, FullBinary), filepath.Join(n.bin, LookupBinary), filepath.Join(n.kc, KubeconfigName), filepath.Join(n.netd, "02-istio-cni.conflist")} {
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

// Our own entry beside upstream's in one file (both installers ran once):
// ours goes, upstream's stays.
func TestUninstallStripsOnlyOurEntry(t *testing.T) {
	n := newNode(t)
	both := strings.TrimSuffix(upstreamBridge, "]}") + `,{"type":"istio-cni","kubeconfig":"/var/run/istio-cni/istio-cni-kubeconfig","exclude_namespaces":[]}]}`
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), both, 0o644)
	if err := New(n.config(), Deps{}).Uninstall(); err != nil {
		t.Fatal(err)
	}
	if got := n.read(filepath.Join(n.netd, "10-bridge.conflist")); !strings.Contains(got, `"cni_agent_run_dir"`) || strings.Count(got, `"istio-cni"`) != 2 {
		t.Errorf("after our uninstall, want upstream's entry only:\n%s", got)
	}
}

// upstreamKubeconfig is the plugin kubeconfig upstream Istio's installer
// writes as LegacyKubeconfigName (cni/pkg/install/kubeconfig.go).
const upstreamKubeconfig = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://10.96.0.1:443
  name: local
contexts:
- context:
    cluster: local
    user: istio-cni
  name: istio-cni-context
current-context: istio-cni-context
kind: Config
preferences: {}
users:
- name: istio-cni
  user:
    token: upstream-token
`

// A plugin invocation that began before the uninstall (the runtime's cached
// config, a DEL already exec'd, an ADD waiting on the API) writes its log
// and its record after the uninstall removed them. It must not leave a
// file behind: both live in directories only the installer makes; the
// plugin creates files, never directories.
func TestLateInvocationLeavesNothingAfterUninstall(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	onNode := func(hostPath string) string {
		hostRun := filepath.Dir(n.config().HostKubeconfigPath)
		rel, err := filepath.Rel(hostRun, hostPath)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("%s is not in the run directory %s", hostPath, hostRun)
		}
		return filepath.Join(n.kc, rel)
	}
	entry := n.in.entry()
	logFile, records := onNode(entry.LogFile), applied.Store{Dir: onNode(entry.RecordsDir)}
	record := applied.Record{PodUID: "uid", Pod: "default/late", Container: "c1"}
	// The plugin's own open (pkg/plugin's openLogFile): the file may be
	// created, its directory not.
	appendLine := func() error {
		f, err := os.OpenFile(logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteString("{}\n")
		return errors.Join(err, f.Close())
	}
	if err := errors.Join(appendLine(), records.Write(record)); err != nil {
		t.Fatalf("the plugin cannot log or record while installed: %v", err)
	}
	n.uninstall.Store(true)
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	_, _ = appendLine(), records.Write(record) // the late invocation
	left, _ := os.ReadDir(n.kc)
	for _, e := range left {
		t.Errorf("left in the run directory after a late invocation: %s", e.Name())
	}
}

// TestUninstallDrainsTheRuntime: the binaries and kubeconfig outlast the
// configs that name them by RuntimeDrain, so a sandbox whose setup loaded
// the chain before the configs went still finds the plugin.
func TestUninstallDrainsTheRuntime(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	cfg := n.config()
	cfg.RuntimeDrain = time.Second
	n.start(cfg)
	n.waitReady()
	name, _ := n.owned()
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- New(cfg, Deps{}).Uninstall() }()
	bin := filepath.Join(n.bin, PluginBinary)
	n.eventually("our conflist gone", func() (bool, string) { return !exists(filepath.Join(n.netd, name)), name })
	if !exists(bin) || n.kubeconfig() == "" {
		t.Error("the binary or kubeconfig went with the conflist, before the runtime drained")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if exists(bin) {
		t.Error("the binary is left after the drain")
	}
}
