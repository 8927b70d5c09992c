package hostfs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	keep := []string{"istio-cni", ".istio-cni.tmp", ".other.0123456789abcdef.tmp", ".istio-cni.0123456789abcdeg.tmp"}
	gone := []string{".istio-cni.0123456789abcdef.tmp", ".istio-cni.fedcba9876543210.tmp"}
	for _, f := range append(append([]string{}, keep...), gone...) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.RemoveTemps(func(name string) bool { return name == "istio-cni" }); err != nil {
		t.Fatal(err)
	}
	for _, f := range keep {
		if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
	for _, f := range gone {
		if _, err := os.Lstat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", f, err)
		}
	}
}
