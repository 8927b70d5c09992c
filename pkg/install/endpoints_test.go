package install

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	n := newNode(t)
	n.start(n.config())
	n.eventually("serving", func() (bool, string) {
		n.in.mu.Lock()
		defer n.in.mu.Unlock()
		return len(n.in.addrs) == 2, "no listeners"
	})
	n.in.mu.Lock()
	health, metrics := "http://"+n.in.addrs[0], "http://"+n.in.addrs[1]
	n.in.mu.Unlock()
	if code, _ := get(t, health+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	n.eventually("/readyz says there is no primary", func() (bool, string) {
		code, body := get(t, health+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "primary"), fmt.Sprint(code, body)
	})
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	n.waitReady()
	if code, _ := get(t, health+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when ready: %d", code)
	}
	_, body := get(t, metrics+"/metrics")
	for _, want := range []string{"istio_cni_install_ready 1", `istio_cni_install_writes_total{file="conflist",reason="install"} 1`,
		"istio_cni_install_repair_seconds_count", "istio_cni_install_preempted 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

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
