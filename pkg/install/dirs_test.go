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
