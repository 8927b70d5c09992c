package hostfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestMkdir(t *testing.T) {
	d := newDir(t)
	if err := d.Mkdir("log", 0o700); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(d.Path(), "log"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v; want a 0700 directory", fi, err)
	}
	if err := d.Mkdir("log", 0o700); err != nil {
		t.Errorf("an existing directory: %v", err)
	}
	secret := t.TempDir()
	if err := os.Symlink(secret, filepath.Join(d.Path(), "link")); err != nil {
		t.Fatal(err)
	}
	if err := d.Mkdir("link", 0o700); err == nil {
		t.Error("a symlink to a directory was taken as the directory")
	}
	if _, err := d.WriteFile("file", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Mkdir("file", 0o700); err == nil {
		t.Error("a file was taken as the directory")
	}
}

func TestRemoveTree(t *testing.T) {
	d := newDir(t)
	sub := filepath.Join(d.Path(), "log")
	if err := os.MkdirAll(filepath.Join(sub, "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(sub, "a.log"), filepath.Join(sub, "deeper", "b")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A link inside points out: removing the tree removes the link only.
	outside := outsideFile(t, "keep")
	if err := os.Symlink(outside, filepath.Join(sub, "out")); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveTree("log"); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(d.Path())
	for _, e := range left {
		t.Errorf("left: %s", e.Name())
	}
	mustContain(t, outside, "keep")
	if err := d.RemoveTree("log"); err != nil {
		t.Errorf("removing an absent tree: %v", err)
	}
	// A symlink at the name is removed itself, its target kept.
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, sub); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveTree("log"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sub); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link is still there: %v", err)
	}
	mustContain(t, filepath.Join(target, "f"), "keep")
}

func TestRemoveTempTreesAfterAnInterruptedRemoveTree(t *testing.T) {
	d := newDir(t)
	tmp, err := tempName("log")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(tmp, "inner"), "log", "other"} {
		if err := os.MkdirAll(filepath.Join(d.Path(), dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	otherTmp, _ := tempName("other")
	if err := os.Mkdir(filepath.Join(d.Path(), otherTmp), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveTempTrees(func(n string) bool { return n == "log" }); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(d.Path())
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != 3 || left[0] != otherTmp || left[1] != "log" || left[2] != "other" {
		t.Errorf("left %v; want %s, log and other", left, otherTmp)
	}
}
