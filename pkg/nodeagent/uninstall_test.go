package nodeagent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/poll"
)

// TestUninstallCommand: on a node left with istio-cni's files by an agent
// that is gone, `install-cni uninstall` removes them all (the chained
// config first) and keeps the primary's; it refuses while an agent runs.
func TestUninstallCommand(t *testing.T) {
	n := newFakeNode(t)
	a, stopAgent := startAgent(t, n)
	poll.Until(t, 10*time.Second, "installed", func() (bool, string) { return a.installer.Ready() })
	var out, errOut bytes.Buffer
	args := []string{"--cni-bin-dir=" + n.bin, "--cni-net-dir=" + n.netd, "--run-dir=" + n.run}
	if code := Uninstall(args, n.getenv, "/nonexistent", &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "an istio-cni agent is running") {
		t.Fatalf("with the agent running: exit %d, %s", code, errOut.String())
	}
	// The agent stops without uninstalling (no API: it cannot tell), as
	// on a node that was down when istio-cni was deleted.
	stopAgent()
	records := filepath.Join(n.run, install.RecordsDirName, "pod-uid")
	if err := os.MkdirAll(records, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(n.bin, install.PluginBinary), filepath.Join(n.run, install.KubeconfigName),
		filepath.Join(n.netd, "02-istio-cni.conflist")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("before: %v", err)
		}
	}
	out.Reset()
	errOut.Reset()
	if code := Uninstall(args, n.getenv, "/nonexistent", &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, dir := range []string{n.bin, n.run} {
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s still holds %v", dir, left)
		}
	}
	left, _ := os.ReadDir(n.netd)
	if len(left) != 1 || left[0].Name() != "10-bridge.conflist" {
		t.Errorf("net.d holds %v, want only the primary", left)
	}
	if b, _ := os.ReadFile(filepath.Join(n.netd, "10-bridge.conflist")); string(b) != bridgePrimary {
		t.Errorf("primary changed:\n%s", b)
	}
	if code := Uninstall([]string{"--cni-net-dir=relative"}, n.getenv, "/nonexistent", &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--cni-net-dir") {
		t.Errorf("relative path: exit %d, %s", code, errOut.String())
	}
}
