package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
)

const calicoList = `{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico"},{"type":"portmap"}]}`

// ReadConfDir reads what the runtime reads, as it orders it, and nothing
// the installer must not: no symlink is followed, no file over
// chain.MaxConfigSize is read, a FIFO is not opened. pkg/chain decides
// from that value alone.
func TestReadConfDirReadsWhatTheRuntimeReads(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10-calico.conflist", calicoList)
	write("07-k8s.yaml", calicoList) // not a config name
	write("05-huge.conflist", strings.Repeat("x", chain.MaxConfigSize+1))
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte(calicoList), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"04-link.conflist": secret, "03-dirlink.conf": dir} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "02-fifo.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "01-dir.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "k8s-pod-network")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "tuning.conf"), []byte(`{"type":"tuning"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cd, err := ReadConfDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(cd.Names(), " "), "02-fifo.conf 03-dirlink.conf 04-link.conflist 05-huge.conflist 10-calico.conflist"; got != want {
		t.Errorf("names %q, want %q", got, want)
	}
	for _, f := range cd.Files {
		if f.Data != nil && f.Name != "10-calico.conflist" {
			t.Errorf("%s was read", f.Name)
		}
	}
	if f, _ := cd.Lookup("04-link.conflist"); !f.LinkToRegular {
		t.Error("the link to a file is not told apart")
	}
	if f, _ := cd.Lookup("03-dirlink.conf"); f.LinkToRegular {
		t.Error("the link to a directory counts as one to a file")
	}
	if confs := cd.PluginConfs["k8s-pod-network"]; len(confs) != 1 || string(confs[0].Data) != `{"type":"tuning"}` {
		t.Errorf("plugin confs %+v", cd.PluginConfs)
	}
	// The decision from that value: the link, which the runtime would
	// read, stops the search, named.
	if _, err := chain.FindPrimary(cd, DefaultOwnedName); err == nil || !strings.Contains(err.Error(), "refusing CNI config 04-link.conflist") {
		t.Errorf("FindPrimary: %v, want the link refused by name", err)
	}
	if err := os.Remove(filepath.Join(dir, "04-link.conflist")); err != nil {
		t.Fatal(err)
	}
	cd, _ = ReadConfDir(dir)
	if _, err := chain.FindPrimary(cd, DefaultOwnedName); err == nil || !strings.Contains(err.Error(), "refusing CNI config 05-huge.conflist") {
		t.Errorf("FindPrimary: %v, want the giant refused by name", err)
	}
	if cd, err := ReadConfDir(filepath.Join(dir, "missing")); err != nil || len(cd.Files) != 0 {
		t.Errorf("a missing directory: %+v, %v; want nothing, as the runtime finds nothing", cd, err)
	}
	if _, err := chain.FindPrimary(chain.Dir{}, DefaultOwnedName); !errors.Is(err, chain.ErrNoPrimary) {
		t.Errorf("nothing: %v", err)
	}
}

// A network's plugin directory that is a symlink: libcni follows it, the
// installer does not. The primary then cannot chain (its extra plugins
// would run after istio-cni): refused by name, never skipped for the next
// file, which would chain after the wrong primary.
func TestSymlinkedPluginDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-calico.conflist"), []byte(calicoList), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "20-other.conflist"), []byte(strings.Replace(calicoList, "k8s-pod-network", "other", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	plugins := t.TempDir()
	if err := os.WriteFile(filepath.Join(plugins, "tuning.conf"), []byte(`{"type":"tuning"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(plugins, filepath.Join(dir, "k8s-pod-network")); err != nil {
		t.Fatal(err)
	}
	cd, err := ReadConfDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = chain.FindPrimary(cd, "02-istio-cni.conflist")
	if err == nil || errors.Is(err, chain.ErrNoPrimary) || !strings.Contains(err.Error(), "refusing CNI config 10-calico.conflist") || !strings.Contains(err.Error(), "a symlink") {
		t.Errorf("FindPrimary: %v, want 10-calico.conflist refused for its symlinked plugin directory", err)
	}
}
