package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// LookPath finds in PATH what exec.LookPath finds, and refuses what it
// refuses, before it tries fallbackDirs.
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
				// Only fallbackDirs may then find it.
				if err == nil && !slices.Contains(fallbackDirs, filepath.Dir(got)) {
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
		backend       Backend
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
		if r, s := c.backend.Programs(c.ipv6); r != c.restore || s != c.save {
			t.Errorf("%s.Programs(ipv6 %v) = %s, %s; want %s, %s", c.backend, c.ipv6, r, s, c.restore, c.save)
		}
	}
}

// What cannot go over netlink says why, naming the field's allowed values
// where the config is wrong; nothing runs without a Reader.
func TestWritableRefusals(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cache := t.TempDir()
	for _, c := range []struct {
		backend        Backend
		cacheDir, want string
	}{
		{NFT, "", "no cache_dir"},
		{Legacy, cache, "ipv4 backend legacy"},
		{"nftables", cache, `unknown iptables backend "nftables": want auto, legacy or nft`},
		{"", cache, "iptables-restore"}, // auto's program: not found, or not remembered
	} {
		if v, err := Writable(c.backend, false, c.cacheDir, nil); err == nil || v != "" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Writable(%q, %q) = %q, %v; want no release and an error saying %q", c.backend, c.cacheDir, v, err, c.want)
		}
	}
}

// Writable answers the release remembered for the program, when nfnl
// lays it out (Layouts), and refuses another, naming it; a miss asks
// miss, and a nil miss is a no.
func TestWritableRemembered(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "iptables-nft-restore")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	key, err := Key("iptables-nft-restore", prog)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1.8.7", "1.8.8", "1.8.9", "1.8.10", "1.8.11", "1.8.12", "1.8.13"}; !slices.Equal(Layouts, want) {
		t.Errorf("Layouts = %q, want %q", Layouts, want)
	}
	for v, laidOut := range map[string]bool{"1.8.7": true, "1.8.8": true, "1.8.9": true, "1.8.10": true, "1.8.11": true, "1.8.12": true, "1.8.13": true, "1.8.6": false, "1.8.99": false, "1.8.1": false} {
		if HasLayout(v) != laidOut {
			t.Errorf("HasLayout(%q) = %v, want %v", v, !laidOut, laidOut)
		}
		cache := t.TempDir()
		if err := os.WriteFile(filepath.Join(cache, "iptables-nft-restore.version"), File(key, v), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Writable(NFT, false, cache, nil)
		switch {
		case laidOut && (err != nil || got != v):
			t.Errorf("remembered %s: %q, %v; want %s", v, got, err, v)
		case !laidOut && (err == nil || got != "" || !strings.Contains(err.Error(), "iptables "+v+",")):
			t.Errorf("remembered %s: %q, %v; want no release and an error naming it", v, got, err)
		}
		// Nothing remembered: miss answers.
		asked, empty := 0, t.TempDir()
		miss := func(cacheFile, name, path, k string) (string, error) {
			asked++
			if cacheFile != filepath.Join(empty, "iptables-nft-restore.version") || name != "iptables-nft-restore" || path != prog || k != key {
				t.Errorf("miss(%q, %q, %q, %q)", cacheFile, name, path, k)
			}
			return v, nil
		}
		got, err = Writable(NFT, false, empty, miss)
		switch {
		case asked != 1:
			t.Errorf("%s: miss asked %d times, want once", v, asked)
		case laidOut && (err != nil || got != v):
			t.Errorf("%s from miss: %q, %v; want %s", v, got, err, v)
		case !laidOut && (err == nil || got != ""):
			t.Errorf("%s from miss: %q, %v; want a no", v, got, err)
		}
	}
	if got, err := Writable(NFT, false, t.TempDir(), nil); err == nil || got != "" || !strings.Contains(err.Error(), "is remembered in") {
		t.Errorf("nothing remembered, no miss: %q, %v; want a no", got, err)
	}
}

// A program the kernel will not run for this process (here on a noexec
// mount, its mode bits 0755) is passed over, as exec.LookPath passes it:
// the runner would fail to exec it. The test re-runs itself in a mount
// namespace of its own.
func TestLookPathSkipsWhatTheKernelWontRun(t *testing.T) {
	if os.Getenv("RELEASE_TEST_NOEXEC") == "" {
		if os.Geteuid() != 0 {
			t.Skip("mounting needs root")
		}
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestLookPathSkipsWhatTheKernelWontRun$", "-test.v")
		cmd.Env = append(os.Environ(), "RELEASE_TEST_NOEXEC=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // mounts made private
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	noexec, plain := t.TempDir(), t.TempDir()
	if err := syscall.Mount("tmpfs", noexec, "tmpfs", syscall.MS_NOEXEC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(noexec, syscall.MNT_DETACH) })
	for _, dir := range []string{noexec, plain} {
		if err := os.WriteFile(filepath.Join(dir, "prog"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", noexec+":"+plain)
	want := filepath.Join(plain, "prog")
	if p, err := exec.LookPath("prog"); err != nil || p != want {
		t.Fatalf("exec.LookPath: %q, %v; want %s", p, err, want)
	}
	if p, err := LookPath("prog"); err != nil || p != want {
		t.Errorf("LookPath: %q, %v; want %s, as exec.LookPath", p, err, want)
	}
	if p, err := LookPath(filepath.Join(noexec, "prog")); err == nil {
		t.Errorf("LookPath of the noexec program by its path: %q, want refused", p)
	}
}

// The node agent recalls the release the plugin remembered for each
// family's own program, without seeing the program; anything but a cache
// file for that name is none.
func TestRecalled(t *testing.T) {
	key := func(name string) string {
		return name + " /usr/sbin/" + name + " 2049:131 225720 1700000000 1700000001"
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		ipv6  bool
		want  string
	}{
		{"auto", map[string]string{"iptables-restore.version": string(File(key("iptables-restore"), "1.8.7"))}, false, "1.8.7"},
		{"auto-ipv6", map[string]string{
			"iptables-restore.version":  string(File(key("iptables-restore"), "1.8.7")),
			"ip6tables-restore.version": string(File(key("ip6tables-restore"), "1.8.11")),
		}, true, "1.8.11"},
		{"a-pinned-backends-file", map[string]string{"iptables-nft-restore.version": string(File(key("iptables-nft-restore"), "1.8.10"))}, false, ""},
		{"another-programs-key", map[string]string{"iptables-restore.version": string(File(key("ip6tables-restore"), "1.8.7"))}, false, ""},
		{"no-release", map[string]string{"iptables-restore.version": key("iptables-restore") + "\n"}, false, ""},
		{"only-the-other-family", map[string]string{"iptables-restore.version": string(File(key("iptables-restore"), "1.8.7"))}, true, ""},
		{"none", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := Recalled(dir, tc.ipv6); got != tc.want {
				t.Errorf("Recalled = %q, want %q", got, tc.want)
			}
		})
	}
}
