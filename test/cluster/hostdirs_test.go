package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func present(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestHostDirsSharedParent: two runs under one parent the machine lacked
// (the fleet's /etc/cni/net.d beside the e2e's /etc/cni/multus/net.d):
// the first release removes only its own leaf, the last removes the
// parent, and what the machine had stays.
func TestHostDirsSharedParent(t *testing.T) {
	root := t.TempDir()
	reg := hostDirRegistry{dir: filepath.Join(root, "registry")}
	fleet, e2e := filepath.Join(root, "etc/cni/net.d"), filepath.Join(root, "etc/cni/multus/net.d")
	a, err := reg.claim([]string{fleet})
	if err != nil {
		t.Fatal(err)
	}
	b, err := reg.claim([]string{e2e})
	if err != nil {
		t.Fatal(err)
	}
	if !present(fleet) || !present(e2e) {
		t.Fatal("claimed directories were not made")
	}
	if err := a.Release(); err != nil {
		t.Fatalf("first release: %v", err)
	}
	if present(fleet) || !present(e2e) {
		t.Fatalf("after the first release: %s exists %v (want false), %s exists %v (want true)", fleet, present(fleet), e2e, present(e2e))
	}
	if err := b.Release(); err != nil {
		t.Fatalf("last release: %v", err)
	}
	if present(filepath.Join(root, "etc")) {
		t.Error("the last release left the parent the tests made")
	}
	if !present(root) {
		t.Error("a directory the machine had was removed")
	}
	if err := b.Release(); err != nil {
		t.Errorf("a second release: %v", err)
	}
}

// TestHostDirsKilledClaimSwept: a run killed while it held its claim
// leaves its directories; the next claim removes them.
func TestHostDirsKilledClaimSwept(t *testing.T) {
	root := t.TempDir()
	reg := hostDirRegistry{dir: filepath.Join(root, "registry")}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(root, "opt/cni/bin")
	made := map[string]bool{}
	if err := mkdirRecorded(left, made); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(reg.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	list := []string{filepath.Join(root, "opt"), filepath.Join(root, "opt/cni"), left}
	writeJSON(t, filepath.Join(reg.dir, "made.json"), list)
	writeJSON(t, filepath.Join(reg.dir, "claim-1-1.json"), hostDirClaim{PID: dead.Process.Pid, Start: 1, Paths: []string{left}})
	other := filepath.Join(root, "run/istio-cni")
	c, err := reg.claim([]string{other})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Release() }()
	if present(filepath.Join(root, "opt")) {
		t.Error("the killed run's directories were not swept by the next claim")
	}
	if !present(other) {
		t.Error("the new claim's directory is missing")
	}
}

// TestHostDirsLeavesOthersFiles: a made directory someone else wrote into
// is left, without an error, and disowned: a later sweep does not pull it
// from under its new user the moment it is empty (a test's network
// namespaces come and go in /run/netns).
func TestHostDirsLeavesOthersFiles(t *testing.T) {
	root := t.TempDir()
	reg := hostDirRegistry{dir: filepath.Join(root, "registry")}
	dir := filepath.Join(root, "run/netns")
	c, err := reg.claim([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "someone-elses")
	if err := os.WriteFile(foreign, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatalf("release with a foreign file inside: %v", err)
	}
	if !present(foreign) {
		t.Fatal("a foreign file was removed")
	}
	if err := os.Remove(foreign); err != nil {
		t.Fatal(err)
	}
	c2, err := reg.claim([]string{filepath.Join(root, "elsewhere")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Release(); err != nil {
		t.Fatal(err)
	}
	if !present(dir) {
		t.Error("a disowned directory was removed once empty")
	}
}

func TestHostDirsBadPath(t *testing.T) {
	reg := hostDirRegistry{dir: filepath.Join(t.TempDir(), "registry")}
	for _, p := range []string{"relative/dir", "/", "/etc/../etc/cni"} {
		if _, err := reg.claim([]string{p}); err == nil {
			t.Errorf("claim %q: no error", p)
		}
	}
}

// TestHostDirsRefuses: a path that is a link to nothing is no mount
// point, and a record of the made directories that does not parse is an
// error, not a fresh start that forgets them.
func TestHostDirsRefuses(t *testing.T) {
	root := t.TempDir()
	reg := hostDirRegistry{dir: filepath.Join(root, "registry")}
	link := filepath.Join(root, "dangling")
	if err := os.Symlink(filepath.Join(root, "nowhere"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.claim([]string{link}); err == nil {
		t.Error("claimed a link to nothing")
	}
	if err := os.WriteFile(filepath.Join(reg.dir, "made.json"), []byte(`["/x`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.claim([]string{filepath.Join(root, "d")}); err == nil {
		t.Error("a torn made.json was read as no directories made")
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
