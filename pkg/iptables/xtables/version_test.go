package xtables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
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

// machineRelease is the release the fakes print: the machine's, whose
// layout nfnl knows.
const machineRelease = "1.8.9"

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
	dir, runs := fakeIptables(t, "v"+machineRelease+" (nf_tables)")
	if err := os.Symlink("iptables-restore", filepath.Join(dir, "iptables-nft-restore")); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil || l != (nfnl.Layout{}) || countRuns(t, runs) != 0 {
		t.Fatalf("nothing remembered: %q, %v after %d runs, want a no and no run", l.Release(), err, countRuns(t, runs))
	}
	if l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err != nil || l.Release() != machineRelease || countRuns(t, runs) != 1 {
		t.Fatalf("the plugin's check: %q, %v after %d runs, want %s's layout after one run", l.Release(), err, countRuns(t, runs), machineRelease)
	}
	if l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err != nil || l.Release() != machineRelease || countRuns(t, runs) != 1 {
		t.Errorf("remembered: %q, %v after %d runs, want %s's layout and no further run", l.Release(), err, countRuns(t, runs), machineRelease)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "iptables-restore"), later, later); err != nil {
		t.Fatal(err)
	}
	if l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil || l != (nfnl.Layout{}) || countRuns(t, runs) != 1 {
		t.Errorf("the program changed: %q, %v, want a no without a run", l.Release(), err)
	}
	if _, err := NetlinkWritable(release.NFT, iptables.IPv4, "", true); err == nil {
		t.Error("no cache_dir: yes, want a no")
	}
	if _, err := NetlinkWritable(release.Legacy, iptables.IPv4, cache, true); err == nil {
		t.Error("legacy: yes, want a no")
	}
}

// Each release nfnl lays out is written in its own layout; another
// (one older or newer than nfnl knows) is a no, whether the plugin reads
// it or finds it remembered.
func TestNetlinkWritableLaysOutTheNodesRelease(t *testing.T) {
	for v, laidOut := range map[string]bool{"1.8.7": true, "1.8.8": true, "1.8.9": true, "1.8.10": true, "1.8.11": true, "1.8.12": true, "1.8.13": true, "1.8.6": false, "1.8.99": false} {
		t.Run(v, func(t *testing.T) {
			check := func(how string, l nfnl.Layout, err error) {
				t.Helper()
				switch {
				case laidOut && (err != nil || l.Release() != v):
					t.Errorf("%s: %q, %v; want %s's layout", how, l.Release(), err, v)
				case !laidOut && (err == nil || l != (nfnl.Layout{}) || !strings.Contains(err.Error(), v)):
					t.Errorf("%s: %q, %v; want a no naming %s", how, l.Release(), err, v)
				}
			}
			// The plugin reads the release, and remembers it.
			dir, runs := fakeIptables(t, "v"+v+" (nf_tables)")
			prog := filepath.Join(dir, "iptables-nft-restore")
			if err := os.Symlink("iptables-restore", prog); err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true)
			check("read", l, err)
			l, err = NetlinkWritable(release.NFT, iptables.IPv4, cache, false)
			check("remembered", l, err)
			if n := countRuns(t, runs); n != 1 {
				t.Errorf("ran iptables-restore --version %d times, want once", n)
			}

			// The shim finds it remembered, as another build wrote it.
			cache = t.TempDir()
			key, err := release.Key("iptables-nft-restore", prog)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cache, "iptables-nft-restore.version"), release.File(key, v), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err = NetlinkWritable(release.NFT, iptables.IPv4, cache, false)
			check("remembered by another", l, err)
			if n := countRuns(t, runs); n != 1 {
				t.Errorf("ran iptables-restore --version %d times, want once", n)
			}
		})
	}
}

// The cache is keyed by the file the program's name leads to: pointed at
// another file (the alternatives switched), even one of the same size and
// time, the release is not remembered; pointed at a legacy one, release.Auto says
// so without running it.
func TestNetlinkWritableFollowsTheLink(t *testing.T) {
	dir, runs := fakeIptables(t, "v"+machineRelease+" (nf_tables)")
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
	if l, err := NetlinkWritable(release.Auto, iptables.IPv4, cache, true); err != nil || l.Release() != machineRelease || countRuns(t, runs) != 1 {
		t.Fatalf("first check: %q, %v after %d runs, want %s's layout after one run", l.Release(), err, countRuns(t, runs), machineRelease)
	}
	if l, err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err != nil || l.Release() != machineRelease {
		t.Fatalf("remembered: %q, %v; want %s's layout", l.Release(), err, machineRelease)
	}
	if v := release.Recalled(cache, false); v != machineRelease {
		t.Fatalf("the agent recalls release %q, want %s", v, machineRelease)
	}
	link("xtables-nft-multi.new")
	if _, err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err == nil || !strings.Contains(err.Error(), "is remembered in") {
		t.Errorf("another file of the same size and time: %v, want not remembered", err)
	}
	link("xtables-legacy-multi")
	if _, err := NetlinkWritable(release.Auto, iptables.IPv4, cache, false); err == nil || !strings.Contains(err.Error(), "backend legacy") || countRuns(t, runs) != 1 {
		t.Errorf("a legacy program: %v after %d runs, want backend legacy and no run", err, countRuns(t, runs))
	}
}

// The cache holds nothing stale or hostile: a program rewritten in place
// (same inode, size and time) is not remembered; a program switched while
// its release is read is not remembered either; a cache file that is a
// FIFO is no answer, never a hang.
func TestNetlinkWritableDistrustsTheCache(t *testing.T) {
	dir, runs := fakeIptables(t, "v"+machineRelease+" (nf_tables)")
	prog := filepath.Join(dir, "iptables-restore")
	cache := t.TempDir()
	if err := os.Symlink("iptables-restore", filepath.Join(dir, "iptables-nft-restore")); err != nil {
		t.Fatal(err)
	}
	if l, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err != nil || l.Release() != machineRelease {
		t.Fatalf("%q, %v; want %s's layout", l.Release(), err, machineRelease)
	}
	st, err := os.Stat(prog)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	rewritten := strings.Replace(string(old), machineRelease, "1.8.1", 1) // same length
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
	if _, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil {
		t.Error("rewritten in place with the same size and time: still remembered")
	}

	// The program switches to another file while its release is read.
	other := filepath.Join(dir, "xtables-legacy-multi")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho 'iptables-restore v1.8.9 (legacy)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	switching := "#!/bin/sh\necho x >> " + runs + "\n/bin/ln -sf " + other + " " + filepath.Join(dir, "iptables-nft-restore") + "\necho 'iptables-restore v" + machineRelease + " (nf_tables)'\n"
	if err := os.WriteFile(prog, []byte(switching), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, true); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("switched while read: %v, want a no saying it changed", err)
	}
	if _, err := NetlinkWritable(release.NFT, iptables.IPv4, cache, false); err == nil {
		t.Error("switched while read: remembered")
	}

	fifoDir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(fifoDir, "iptables-nft-restore.version"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := NetlinkWritable(release.NFT, iptables.IPv4, fifoDir, false); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO cache file: yes, want a no")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO cache file hung the check")
	}
}
