package chain_test

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testEntry is the entry every golden file is built with.
var testEntry = pluginconf.Entry{
	Kubeconfig:        "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig",
	ExcludeNamespaces: []string{"kube-system"},
	LogLevel:          "info",
}

// primaryModes: the real primaries in testdata/primary and the modes their
// CNIs write them with (Cilium keeps its file private).
var primaryModes = map[string]fs.FileMode{
	"00-multus.conf":      0o644,
	"05-cilium.conflist":  0o600,
	"10-bridge.conf":      0o644,
	"10-calico.conflist":  0o644,
	"10-flannel.conflist": 0o644,
	"10-kindnet.conflist": 0o644, // has a stale istio-cni entry mid-list
}

func loadPrimary(t *testing.T, name string) *chain.Primary {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "primary", name))
	if err != nil {
		t.Fatal(err)
	}
	return &chain.Primary{Name: name, Mode: primaryModes[name], Data: data}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/chain -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run go test ./pkg/chain -update if the change is intended)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// writeFiles creates a CNI config dir holding files (name -> content).
// dirOf is a config directory holding regular files (mode 0644) with the
// given contents, as install.ReadConfDir would read it: only the names a
// runtime reads, in the runtime's order.
func dirOf(files map[string]string, extra ...chain.File) chain.Dir {
	d := chain.Dir{Path: "/etc/cni/net.d"}
	for name, data := range files {
		if chain.IsConfigName(name) {
			d.Files = append(d.Files, chain.File{Name: name, Mode: 0o644, Size: int64(len(data)), Data: []byte(data)})
		}
	}
	d.Files = append(d.Files, extra...)
	slices.SortFunc(d.Files, func(a, b chain.File) int { return strings.Compare(a.Name, b.Name) })
	return d
}
