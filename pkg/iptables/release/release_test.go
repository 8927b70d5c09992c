package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// LookPath finds in PATH what exec.LookPath finds, and refuses what it
// refuses, before it tries the sbin directories.
func TestLookPathIsExecLookPath(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for name, mode := range map[string]os.FileMode{"prog": 0o755, "plain": 0o644, "ownerx": 0o700} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "prog"), filepath.Join(other, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, path := range []string{dir, other + ":" + dir, ":" + dir, ".", "", other} {
		t.Setenv("PATH", path)
		for _, name := range []string{"prog", "plain", "ownerx", "adir", "link", "missing", filepath.Join(dir, "prog"), "./prog", filepath.Join(dir, "plain")} {
			want, wantErr := exec.LookPath(name)
			got, err := LookPath(name)
			if wantErr != nil {
				// Only the sbin directories may then find it.
				if err == nil && !strings.HasPrefix(got, "/usr/sbin/") && !strings.HasPrefix(got, "/sbin/") && !strings.HasPrefix(got, "/usr/local/sbin/") {
					t.Errorf("PATH=%q: LookPath(%q) = %q, exec.LookPath refuses it: %v", path, name, got, wantErr)
				}
				continue
			}
			if err != nil || got != want {
				t.Errorf("PATH=%q: LookPath(%q) = %q, %v; exec.LookPath %q", path, name, got, err, want)
			}
		}
	}
}

func TestPrograms(t *testing.T) {
	for _, c := range []struct {
		backend       string
		ipv6          bool
		restore, save string
	}{
		{Auto, false, "iptables-restore", "iptables-save"},
		{Auto, true, "ip6tables-restore", "ip6tables-save"},
		{NFT, false, "iptables-nft-restore", "iptables-nft-save"},
		{NFT, true, "ip6tables-nft-restore", "ip6tables-nft-save"},
		{Legacy, false, "iptables-legacy-restore", "iptables-legacy-save"},
		{Legacy, true, "ip6tables-legacy-restore", "ip6tables-legacy-save"},
	} {
		if r, s := Programs(c.backend, c.ipv6); r != c.restore || s != c.save {
			t.Errorf("Programs(%s, ipv6 %v) = %s, %s; want %s, %s", c.backend, c.ipv6, r, s, c.restore, c.save)
		}
	}
}

// What cannot go over netlink says why, naming the field's allowed values
// where the config is wrong; nothing runs without a Reader.
func TestWritableRefusals(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cache := t.TempDir()
	for _, c := range []struct {
		backend, cacheDir, want string
	}{
		{NFT, "", "no cache_dir"},
		{Legacy, cache, "ipv4 backend legacy"},
		{"nftables", cache, `unknown iptables backend "nftables": want auto, legacy or nft`},
		{"", cache, "iptables-restore"}, // auto's program: not found, or not remembered
	} {
		if err := Writable(c.backend, false, c.cacheDir, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Writable(%q, %q) = %v, want an error saying %q", c.backend, c.cacheDir, err, c.want)
		}
	}
}
