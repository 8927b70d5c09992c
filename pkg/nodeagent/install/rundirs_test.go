package install

import (
	"os"
	"path/filepath"
	"testing"
)

// The plugin's directories exist once the installer is ready (the conflist
// names them), come back when removed, replace a link planted at their
// name, and the log of an earlier release (in the run directory itself)
// goes.
func TestRunDirsMadeAndRepaired(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	if err := os.MkdirAll(n.kc, 0o700); err != nil {
		t.Fatal(err)
	}
	n.write(filepath.Join(n.kc, PluginLogName), "{}\n", 0o600)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(n.kc, LogDirName)); err != nil {
		t.Fatal(err)
	}
	n.start(n.config())
	n.waitReady()
	isDir := func(name string) (bool, string) {
		fi, err := os.Lstat(filepath.Join(n.kc, name))
		if err != nil {
			return false, err.Error()
		}
		return fi.IsDir() && fi.Mode().Perm() == 0o700, fi.Mode().String()
	}
	for _, name := range runDirs {
		if ok, saw := isDir(name); !ok {
			t.Errorf("%s once ready: %s; want a 0700 directory", name, saw)
		}
	}
	if _, err := os.Lstat(filepath.Join(n.kc, PluginLogName)); !os.IsNotExist(err) {
		t.Errorf("the earlier release's log: %v; want it gone", err)
	}
	if left, _ := os.ReadDir(elsewhere); len(left) != 0 {
		t.Errorf("the link's target was written: %v", left)
	}
	for _, name := range runDirs {
		if err := os.RemoveAll(filepath.Join(n.kc, name)); err != nil {
			t.Fatal(err)
		}
		n.eventually(name+" made again", func() (bool, string) { return isDir(name) })
	}
}
