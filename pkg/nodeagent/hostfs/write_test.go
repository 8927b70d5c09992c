package hostfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, d *Dir, name, data string, mode fs.FileMode) bool {
	t.Helper()
	changed, err := d.WriteFile(name, []byte(data), mode)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

// noTempFiles fails if a hidden temp file was left in d.
func noTempFiles(t *testing.T, d *Dir) {
	t.Helper()
	entries, err := os.ReadDir(d.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
}

func TestWriteFileCreateReplaceUnchanged(t *testing.T) {
	d := newDir(t)
	p := filepath.Join(d.Path(), "10-x.conflist")
	if !write(t, d, "10-x.conflist", "one", 0o644) {
		t.Error("create reported unchanged")
	}
	mustContain(t, p, "one")
	if !write(t, d, "10-x.conflist", "two", 0o644) {
		t.Error("replace reported unchanged")
	}
	mustContain(t, p, "two")

	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(p, past, past); err != nil {
		t.Fatal(err)
	}
	if write(t, d, "10-x.conflist", "two", 0o644) {
		t.Error("identical write reported changed")
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(past) {
		t.Errorf("unchanged write touched the file: mtime %v, want %v", fi.ModTime(), past)
	}
	if !write(t, d, "10-x.conflist", "two", 0o600) {
		t.Error("a mode change reported unchanged")
	}
	if !write(t, d, "10-x.conflist", "twO", 0o600) {
		t.Error("same-size content change reported unchanged")
	}
	mustContain(t, p, "twO")
	noTempFiles(t, d)
}

func TestWriteFileModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	d := newDir(t)
	for _, mode := range []fs.FileMode{0o755, 0o644, 0o600, 0o777, fs.ModeSetuid | 0o755} {
		write(t, d, "f", "x", mode)
		fi, err := os.Lstat(filepath.Join(d.Path(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("mode %v, want %v", fi.Mode(), mode)
		}
	}
	for _, bad := range []fs.FileMode{fs.ModeDir | 0o755, 0o4755} {
		if _, err := d.WriteFile("f", nil, bad); err == nil || !strings.Contains(err.Error(), "only permission bits") {
			t.Errorf("mode %#o: %v, want a bad-mode error", uint32(bad), err)
		}
	}
}

func TestWriteFileReplacesSymlinks(t *testing.T) {
	d := newDir(t)
	secret := outsideFile(t, "root:x:0:0")
	write(t, d, "inside", "inside", 0o644)
	links := map[string]string{
		"02-istio-cni.conflist": secret,                                                  // outside the dir
		"rel":                   "../" + filepath.Base(filepath.Dir(secret)) + "/secret", // relative, escaping
		"in":                    "inside",                                                // inside the dir
		"dangling":              filepath.Join(t.TempDir(), "nothing"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(d.Path(), name)); err != nil {
			t.Fatal(err)
		}
		if !write(t, d, name, "ours", 0o644) {
			t.Errorf("%s: replacing a symlink reported unchanged", name)
		}
		fi, err := d.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("%s is %v after the write, want a regular file", name, fi.Mode())
		}
		mustContain(t, filepath.Join(d.Path(), name), "ours")
	}
	mustContain(t, secret, "root:x:0:0")
	mustContain(t, filepath.Join(d.Path(), "inside"), "inside")
	if _, err := os.Lstat(links["dangling"]); err == nil {
		t.Error("the dangling link's target was created")
	}
	noTempFiles(t, d)
}

func TestWriteFileRemovesTempOnError(t *testing.T) {
	d := newDir(t)
	// A directory at the name makes the final rename fail, even as root.
	if err := os.Mkdir(filepath.Join(d.Path(), "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := d.WriteFile("busy", []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(d.Path(), "busy")) {
		t.Errorf("WriteFile over a directory = %v, want an error naming it", err)
	}
	if _, err := d.CopyFile("busy", "/bin/true", 0o755); err == nil {
		t.Error("CopyFile over a directory succeeded")
	}
	noTempFiles(t, d)
}

func TestCopyFile(t *testing.T) {
	d := newDir(t)
	src := outsideFile(t, strings.Repeat("plugin-binary ", 50_000))
	if changed, err := d.CopyFile("istio-cni", src, 0o755); err != nil || !changed {
		t.Fatalf("first copy: changed=%v err=%v", changed, err)
	}
	if changed, err := d.CopyFile("istio-cni", src, 0o755); err != nil || changed {
		t.Fatalf("second copy: changed=%v err=%v, want unchanged", changed, err)
	}
	// Same size, one byte different at the very end.
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] = '!'
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := d.CopyFile("istio-cni", src, 0o755); err != nil || !changed {
		t.Fatalf("copy of changed source: changed=%v err=%v", changed, err)
	}
	mustContain(t, filepath.Join(d.Path(), "istio-cni"), string(data))

	if _, err := d.CopyFile("x", filepath.Dir(src), 0o755); err == nil || !strings.Contains(err.Error(), filepath.Dir(src)) {
		t.Errorf("copying a directory = %v, want an error naming the source", err)
	}
	if _, err := d.CopyFile("x", src+".missing", 0o755); err == nil {
		t.Error("copying a missing source succeeded")
	}
	noTempFiles(t, d)
}

func TestWriteFileRewritesAFileSomeoneElseOwns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	d := newDir(t)
	write(t, d, "f", "x", 0o644)
	if err := os.Chown(filepath.Join(d.Path(), "f"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if !write(t, d, "f", "x", 0o644) {
		t.Error("a file owned by another user was kept")
	}
	fi, err := d.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 {
		t.Errorf("owner %d after the rewrite, want 0", uid)
	}
}
