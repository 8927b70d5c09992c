package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
)

// The audit's repair writes in the layout of the release the plugin
// remembered for the node's iptables in the run directory's cache, read
// when the repair runs: the plugin remembers it at its first ADD, which may
// come after the agent starts.
func TestRepairsInTheRememberedRelease(t *testing.T) {
	var cfg Config
	cfg.Install.RunDir = t.TempDir()
	n := repairNetwork(cfg, applied.Writer{Backend: release.NFT}, nil)
	if n.Layouts == nil {
		t.Fatal("the audit's repairs are given no node layout")
	}
	if l, ok := n.Layouts(iptables.IPv4); ok {
		t.Fatalf("with nothing remembered, a layout of %s", l.Release())
	}
	cache := filepath.Join(cfg.Install.RunDir, install.CacheDirName)
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"iptables-restore": "1.8.7", "ip6tables-restore": "1.8.11"} {
		body := release.File(name+" /usr/sbin/"+name+" 2049:131 225720 1700000000 1700000001", v)
		if err := os.WriteFile(filepath.Join(cache, name+".version"), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for f, want := range map[iptables.Family]string{iptables.IPv4: "1.8.7", iptables.IPv6: "1.8.11"} {
		if l, ok := n.Layouts(f); !ok || l.Release() != want {
			t.Errorf("%s: layout of %q (%v), want %s's", f, l.Release(), ok, want)
		}
	}
}
