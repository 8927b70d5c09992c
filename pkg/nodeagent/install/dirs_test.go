package install

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetDirRecreated: the whole config directory goes and comes back (a
// node agent reinstalling the primary CNI): the watch is re-armed and our
// conflist is written again.
func TestNetDirRecreated(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	// The installer repairs its conflist while the directory is being
	// emptied; removal succeeds once it has no primary left to copy.
	n.eventually("directory removed", func() (bool, string) {
		err := os.RemoveAll(n.netd)
		return err == nil, fmt.Sprint(err)
	})
	n.eventually("not ready without the directory", func() (bool, string) { ok, why := n.in.Ready(); return !ok, why })
	// The installer may already have recreated it, empty.
	if err := os.MkdirAll(n.netd, 0o755); err != nil {
		t.Fatal(err)
	}
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.waitReady()
	if _, owned := n.owned(); !strings.Contains(owned, "istio-cni") {
		t.Errorf("owned conflist after the directory came back:\n%s", owned)
	}
}

// TestPrimarySortingFirst: a primary named before 02-istio-cni.conflist
// gets ours named before it.
func TestPrimarySortingFirst(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "01-calico.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	if name, _ := n.owned(); name >= "01-calico.conflist" {
		t.Errorf("owned %q does not sort before 01-calico.conflist", name)
	}
}

// TestRunDirMadePrivate: the run directory (the plugin's token) exists as
// the DaemonSet's hostPath makes it, 0755; the installer takes group and
// other access off it, and off again after someone widens it.
func TestRunDirMadePrivate(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(n.kc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(n.kc, 0o755); err != nil {
		t.Fatal(err)
	}
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.start(n.config())
	n.waitReady()
	mode := func() os.FileMode {
		fi, err := os.Stat(n.kc)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if m := mode(); m != 0o700 {
		t.Errorf("run directory mode %#o, want 0700", m)
	}
	if err := os.Chmod(n.kc, 0o777); err != nil {
		t.Fatal(err)
	}
	n.rotateToken() // any change that rewrites the kubeconfig
	n.eventually("private again", func() (bool, string) { m := mode(); return m == 0o700, fmt.Sprintf("%#o", m) })
}
