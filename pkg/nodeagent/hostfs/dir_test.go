package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newDir(t *testing.T) *Dir {
	t.Helper()
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// outsideFile is a file in another directory that a planted link points at.
func outsideFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustContain(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s holds %q, want %q", path, got, want)
	}
}

func TestOpenDirErrorsNameThePath(t *testing.T) {
	file := outsideFile(t, "x")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, p := range []string{file, missing} {
		_, err := OpenDir(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("OpenDir(%s) = %v, want an error naming the path", p, err)
		}
	}
}

func TestOpenDirThroughSymlinkedPath(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(link)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != link {
		t.Errorf("Path() = %s, want %s", d.Path(), link)
	}
	if _, err := d.WriteFile("f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustContain(t, filepath.Join(real, "f"), "x")
}

func TestBadNamesRejected(t *testing.T) {
	d := newDir(t)
	for _, name := range []string{"", ".", "..", "../x", "a/b", "/etc/passwd", "x\x00"} {
		if _, err := d.WriteFile(name, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "single path element") {
			t.Errorf("WriteFile(%q) = %v, want a bad-name error", name, err)
		}
		if _, err := d.ReadFile(name); err == nil {
			t.Errorf("ReadFile(%q) succeeded", name)
		}
		if err := d.Remove(name); err == nil {
			t.Errorf("Remove(%q) succeeded", name)
		}
		if _, err := d.Lstat(name); err == nil {
			t.Errorf("Lstat(%q) succeeded", name)
		}
	}
	if _, err := d.WriteFile("../x", []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), `"../x"`) {
		t.Errorf("error %v does not name the bad name", err)
	}
}

func TestReadFileRefusesSymlinks(t *testing.T) {
	d := newDir(t)
	if _, err := d.WriteFile("real", []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	// os.Root would follow both of these (the first stays inside the root).
	links := map[string]string{"in": "real", "out": outsideFile(t, "secret")}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(d.Path(), name)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReadFile(name); !errors.Is(err, ErrSymlink) {
			t.Errorf("ReadFile(%s -> %s) = %v, want ErrSymlink", name, target, err)
		}
	}
	got, err := d.ReadFile("real")
	if err != nil || string(got) != "inside" {
		t.Errorf("ReadFile(real) = %q, %v", got, err)
	}
	if _, err := d.ReadFile("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
	if _, err := d.WriteFile("huge", make([]byte, MaxReadSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadFile("huge"); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "huge") {
		t.Errorf("ReadFile(huge) = %v, want ErrTooLarge naming the file", err)
	}
	if _, err := d.WriteFile("max", make([]byte, MaxReadSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadFile("max"); err != nil || len(got) != MaxReadSize {
		t.Errorf("ReadFile(max) = %d bytes, %v", len(got), err)
	}
}

func TestRemove(t *testing.T) {
	d := newDir(t)
	secret := outsideFile(t, "secret")
	link := filepath.Join(d.Path(), "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("link"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("link still there: %v", err)
	}
	mustContain(t, secret, "secret")

	if _, err := d.WriteFile("f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("f"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("f"); err != nil {
		t.Errorf("removing an absent file: %v", err)
	}
	if err := os.Mkdir(filepath.Join(d.Path(), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("sub"); err == nil {
		t.Error("Remove removed a directory")
	}
}

func TestLstatDescribesTheLink(t *testing.T) {
	d := newDir(t)
	if err := os.Symlink(outsideFile(t, "x"), filepath.Join(d.Path(), "l")); err != nil {
		t.Fatal(err)
	}
	fi, err := d.Lstat("l")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat mode %v, want a symlink", fi.Mode())
	}
}
