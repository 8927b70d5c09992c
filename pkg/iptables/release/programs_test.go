package release

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// At follows a program's links as the node's alternatives lay them out
// (absolute, relative, through a linked directory, as on a merged /usr)
// to the file filepath.EvalSymlinks finds, and tells its backend by the
// names on the way.
func TestAtFollowsTheLinksAsEvalSymlinks(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/sbin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"usr/sbin/xtables-nft-multi", "usr/sbin/xtables-legacy-multi", "usr/sbin/iptables-1.4"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("#!/bin/sh\n"), 0o755); err != nil { // #nosec G306 -- a test's executable
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"sbin":                               "usr/sbin", // merged /usr, relative
		"usr/sbin/iptables-nft-restore":      "xtables-nft-multi",
		"usr/sbin/iptables-legacy-restore":   "xtables-legacy-multi",
		"etc/alternatives/iptables-restore":  filepath.Join(root, "usr/sbin/iptables-nft-restore"),
		"usr/sbin/iptables-restore":          "../../etc/alternatives/iptables-restore",
		"etc/alternatives/ip6tables-restore": filepath.Join(root, "sbin/iptables-legacy-restore"),
		"usr/sbin/ip6tables-restore":         filepath.Join(root, "etc/alternatives/ip6tables-restore"),
		"usr/sbin/iptables-plain-restore":    "iptables-1.4",
		"usr/sbin/iptables-dangling-restore": "missing",
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]Backend{
		"usr/sbin/iptables-restore":       NFT,
		"sbin/iptables-restore":           NFT,
		"usr/sbin/ip6tables-restore":      Legacy,
		"usr/sbin/xtables-nft-multi":      NFT,
		"usr/sbin/iptables-plain-restore": Legacy, // iptables before 1.8
	} {
		p = filepath.Join(root, p)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := realPath(p); err != nil || got != real {
			t.Errorf("realPath(%s) = %q (%v), want EvalSymlinks' %q", p, got, err, real)
		}
		if got, err := At(p); err != nil || got != want {
			t.Errorf("At(%s) = %q (%v), want %q", p, got, err, want)
		}
	}
	dangling := filepath.Join(root, "usr/sbin/iptables-dangling-restore")
	if _, err := At(dangling); err == nil || !strings.Contains(err.Error(), "resolving "+dangling) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("At(a dangling link) = %v, want an error naming it that is os.ErrNotExist", err)
	}
}
