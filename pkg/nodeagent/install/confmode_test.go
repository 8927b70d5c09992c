package install

import (
	"os"
	"path/filepath"
	"testing"
)

// TestConfigFileMode: the configs we write are 0600, or 0640 with
// --cni-conf-group-read, as upstream's installer writes them (CIS
// benchmarks ask for it), whatever the primary's mode; an existing file of
// another mode, from an earlier release, is set right without a content
// change.
func TestConfigFileMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chained   bool
		groupRead bool
		want      os.FileMode
	}{
		{"owned", true, false, 0o600},
		{"owned group read", true, true, 0o640},
		{"standalone", false, false, 0o600},
		{"standalone group read", false, true, 0o640},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
			cfg := n.config()
			cfg.ConfGroupRead = tc.groupRead
			path := filepath.Join(n.netd, "02-istio-cni.conflist")
			if !tc.chained {
				cfg.Chained, cfg.OwnedConfigName = false, DefaultStandaloneName
				path = filepath.Join(n.netd, DefaultStandaloneName)
			}
			mode := func() (bool, string) {
				fi, err := os.Stat(path)
				if err != nil {
					return false, err.Error()
				}
				return fi.Mode().Perm() == tc.want, fi.Mode().String()
			}
			n.start(cfg)
			n.waitReady()
			n.eventually("written with its mode", mode)
			if err := n.stop(); err != nil {
				t.Fatal(err)
			}
			// An earlier release left it 0644: the next start fixes the mode.
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			n.start(cfg)
			n.waitReady()
			n.eventually("its mode set right", mode)
		})
	}
}
