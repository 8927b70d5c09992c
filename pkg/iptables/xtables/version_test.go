package xtables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// fakeIptables puts a program printing version into a PATH directory of
// its own, and counts its runs in a file next to it.
func fakeIptables(t *testing.T, version string) (dir, runs string) {
	t.Helper()
	dir = t.TempDir()
	runs = filepath.Join(dir, "runs")
	script := "#!/bin/sh\necho x >> " + runs + "\necho \"iptables-restore " + version + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "iptables-restore"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return dir, runs
}

func countRuns(t *testing.T, runs string) int {
	b, _ := os.ReadFile(runs)
	return strings.Count(string(b), "x")
}

func TestCachedNFTVersion(t *testing.T) {
	dir, runs := fakeIptables(t, "v1.8.9 (nf_tables)")
	cache := filepath.Join(t.TempDir(), "iptables.version")
	for i := 0; i < 3; i++ {
		v, err := CachedNFTVersion(cache, "iptables-restore")
		if err != nil || v != "1.8.9" {
			t.Fatalf("call %d: %q, %v", i, v, err)
		}
	}
	if n := countRuns(t, runs); n != 1 {
		t.Errorf("ran iptables-restore --version %d times, want once", n)
	}
	// The node's iptables is replaced: the cache is stale.
	prog := filepath.Join(dir, "iptables-restore")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho x >> "+runs+"\necho 'iptables-restore v1.8.10 (nf_tables)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(prog, later, later); err != nil {
		t.Fatal(err)
	}
	if v, err := CachedNFTVersion(cache, "iptables-restore"); err != nil || v != "1.8.10" {
		t.Errorf("after an upgrade: %q, %v; want 1.8.10", v, err)
	}
}

func TestNFTVersionRefusesLegacyAndNoise(t *testing.T) {
	for out, want := range map[string]string{
		"v1.8.9 (legacy)": "not nf_tables",
		"v1.6.1":          "not \"<name> v<version>",
	} {
		fakeIptables(t, out)
		if _, err := NFTVersion("iptables-restore"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error saying %q", out, err, want)
		}
	}
}

// The shim's check runs nothing: a release not yet remembered, or
// remembered for the program as it was before a change, is a no; the
// plugin's check remembers it.
func TestNetlinkWritableWithoutRunning(t *testing.T) {
	dir, runs := fakeIptables(t, "v"+release.Layout+" (nf_tables)")
	if err := os.Symlink("iptables-restore", filepath.Join(dir, "iptables-nft-restore")); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil || countRuns(t, runs) != 0 {
		t.Fatalf("nothing remembered: %v after %d runs, want a no and no run", err, countRuns(t, runs))
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err != nil || countRuns(t, runs) != 1 {
		t.Fatalf("the plugin's check: %v after %d runs, want yes after one run", err, countRuns(t, runs))
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err != nil || countRuns(t, runs) != 1 {
		t.Errorf("remembered: %v after %d runs, want yes and no further run", err, countRuns(t, runs))
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "iptables-restore"), later, later); err != nil {
		t.Fatal(err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil || countRuns(t, runs) != 1 {
		t.Errorf("the program changed: %v, want a no without a run", err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, "", true); err == nil {
		t.Error("no cache_dir: yes, want a no")
	}
	if err := NetlinkWritable(release.Legacy, iptables.IPv4, cache, true); err == nil {
		t.Error("legacy: yes, want a no")
	}
}

// The cache is keyed by the file the program's name leads to: pointed at
// another file (the alternatives switched), even one of the same size and
// time, the release is not remembered; pointed at a legacy one, release.Auto says
// so without running it.
func TestNetlinkWritableFollowsTheLink(t *testing.T) {
	dir, runs := fakeIptables(t, "v"+release.Layout+" (nf_tables)")
	script, err := os.ReadFile(filepath.Join(dir, "iptables-restore"))
	if err != nil {
		t.Fatal(err)
	}
	then := time.Now().Add(-time.Hour)
	for _, name := range []string{"xtables-nft-multi", "xtables-nft-multi.new", "xtables-legacy-multi"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, script, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
	}
	link := func(to string) {
		t.Helper()
		p := filepath.Join(dir, "iptables-restore")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	link("xtables-nft-multi")
	if err := NetlinkWritable(release.Auto, iptables.IPv4, cache, true); err != nil || countRuns(t, runs) != 1 {
		t.Fatalf("first check: %v after %d runs, want yes after one run", err, countRuns(t, runs))
	}
	if err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err != nil {
		t.Fatalf("remembered: %v", err)
	}
	link("xtables-nft-multi.new")
	if err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err == nil || !strings.Contains(err.Error(), "is remembered in") {
		t.Errorf("another file of the same size and time: %v, want not remembered", err)
	}
	link("xtables-legacy-multi")
	if err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err == nil || !strings.Contains(err.Error(), "backend legacy") || countRuns(t, runs) != 1 {
		t.Errorf("a legacy program: %v after %d runs, want backend legacy and no run", err, countRuns(t, runs))
	}
}

// The cache holds nothing stale or hostile: a program rewritten in place
// (same inode, size and time) is not remembered; a program switched while
// its release is read is not remembered either; a cache file that is a
// FIFO is no answer, never a hang.
func TestNetlinkWritableDistrustsTheCache(t *testing.T) {
	dir, runs := fakeIptables(t, "v"+release.Layout+" (nf_tables)")
	prog := filepath.Join(dir, "iptables-restore")
	cache := t.TempDir()
	if err := os.Symlink("iptables-restore", filepath.Join(dir, "iptables-nft-restore")); err != nil {
		t.Fatal(err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(prog)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	rewritten := strings.Replace(string(old), release.Layout, "1.8.1", 1) // same length
	f, err := os.OpenFile(prog, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(rewritten), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := os.Chtimes(prog, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil {
		t.Error("rewritten in place with the same size and time: still remembered")
	}

	// The program switches to another file while its release is read.
	other := filepath.Join(dir, "xtables-legacy-multi")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho 'iptables-restore v1.8.9 (legacy)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	switching := "#!/bin/sh\necho x >> " + runs + "\n/bin/ln -sf " + other + " " + filepath.Join(dir, "iptables-nft-restore") + "\necho 'iptables-restore v" + release.Layout + " (nf_tables)'\n"
	if err := os.WriteFile(prog, []byte(switching), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("switched while read: %v, want a no saying it changed", err)
	}
	if err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil {
		t.Error("switched while read: remembered")
	}

	fifoDir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(fifoDir, "iptables-nft-restore.version"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- NetlinkWritable(release.NFT, iptables.IPv4, fifoDir, false) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO cache file: yes, want a no")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO cache file hung the check")
	}
}
