package chain_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/pkg/chain"
)

const preferred = "02-istio-cni.conflist"

func TestGolden(t *testing.T) {
	cases := []struct {
		primary   string
		ownedName string // OwnedName(preferred, primary)
		inplace   string // InplaceName(primary)
	}{
		{"00-multus.conf", "00-istio-cni.conflist", "00-multus.conflist"},
		{"05-cilium.conflist", preferred, "05-cilium.conflist"},
		{"10-bridge.conf", preferred, "10-bridge.conflist"},
		{"10-calico.conflist", preferred, "10-calico.conflist"},
		{"10-flannel.conflist", preferred, "10-flannel.conflist"},
		{"10-kindnet.conflist", preferred, "10-kindnet.conflist"},
	}
	for _, tc := range cases {
		t.Run(tc.primary, func(t *testing.T) {
			p := loadPrimary(t, tc.primary)
			owned, err := chain.Owned(p, testEntry, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "owned", tc.primary+".golden"), owned)
			inplace, err := chain.Inplace(p, testEntry, true)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, filepath.Join("testdata", "inplace", tc.inplace+".golden"), inplace)

			name, changed, err := chain.OwnedName(preferred, tc.primary)
			if err != nil || name != tc.ownedName || changed != (name != preferred) {
				t.Errorf("OwnedName = %q, %v, %v; want %q", name, changed, err, tc.ownedName)
			}
			if got, renamed := chain.InplaceName(tc.primary); got != tc.inplace || renamed != (got != tc.primary) {
				t.Errorf("InplaceName = %q, %v; want %q", got, renamed, tc.inplace)
			}
			checkLibcni(t, owned)
		})
	}
}

// checkLibcni: the runtime accepts the output as a list whose last plugin
// is ours, and (with every type known) no plugin comes from a directory.
func checkLibcni(t *testing.T, data []byte) {
	t.Helper()
	l, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		t.Fatalf("libcni rejects the output: %v", err)
	}
	if n := len(l.Plugins); n == 0 || l.Plugins[n-1].Network.Type != chain.PluginType {
		t.Fatalf("last plugin is not %s: %d plugins", chain.PluginType, n)
	}
	for _, p := range l.Plugins[:len(l.Plugins)-1] {
		if p.Network.Type == chain.PluginType {
			t.Fatalf("more than one %s entry", chain.PluginType)
		}
	}
}

// TestApplyTwice: inplace mode re-run on its own output (under the name it
// was written to) gives the same bytes, and Verify accepts both outputs.
func TestApplyTwice(t *testing.T) {
	for name := range primaryModes {
		t.Run(name, func(t *testing.T) {
			p := loadPrimary(t, name)
			first, err := chain.Inplace(p, testEntry, true)
			if err != nil {
				t.Fatal(err)
			}
			newName, _ := chain.InplaceName(name)
			second, err := chain.Inplace(&chain.Primary{Name: newName, Data: first}, testEntry, true)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Errorf("second run differs\n--- first\n%s--- second\n%s", first, second)
			}
			if err := chain.Verify(first, p, testEntry, true); err != nil {
				t.Errorf("Verify(Owned output) = %v", err)
			}
		})
	}
}
