package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// fakeRestore puts an iptables-nft-restore printing version first in PATH.
func fakeRestore(t *testing.T, version string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho 'iptables-nft-restore v" + version + " (nf_tables)'\n"
	if err := os.WriteFile(filepath.Join(dir, "iptables-nft-restore"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

func TestNetlinkWriterDecides(t *testing.T) {
	conf := func(cacheDir string, b xtables.Backend) *Config {
		c := &Config{}
		c.CacheDir, c.parsed.Backend = cacheDir, b
		return c
	}
	fakeRestore(t, nfnl.Layout)
	cache := t.TempDir()
	if err := (&netlinkWriter{conf: conf(cache, xtables.NFT)}).usable(); err != nil {
		t.Errorf("iptables-nft %s: %v, want netlink", nfnl.Layout, err)
	}
	if _, err := os.Stat(filepath.Join(cache, versionCache)); err != nil {
		t.Errorf("the version was not cached: %v", err)
	}
	for name, c := range map[string]*Config{
		"no cache_dir": conf("", xtables.NFT),
		"legacy":       conf(cache, xtables.Legacy),
	} {
		if err := (&netlinkWriter{conf: c}).usable(); !errors.Is(err, errNetlinkOff) {
			t.Errorf("%s: %v, want netlink off", name, err)
		}
	}
	fakeRestore(t, "1.8.10")
	if err := (&netlinkWriter{conf: conf(t.TempDir(), xtables.NFT)}).usable(); !errors.Is(err, errNetlinkOff) || !strings.Contains(err.Error(), "1.8.10") {
		t.Errorf("iptables 1.8.10: %v, want netlink off naming the release", err)
	}
}

// Only an unexpected refusal is a warning; declining and a sandbox that
// already holds our chains are not.
func TestNetlinkFallbackWarnings(t *testing.T) {
	w := &netlinkWriter{}
	w.fallback(errNetlinkOff)
	w.fallback(&nfnl.KernelError{Op: "ipv4 chain nat ISTIO_INBOUND", Err: unix.EEXIST})
	if len(w.warnings) != 0 || w.by() != "iptables-restore" {
		t.Errorf("warnings %q, by %q", w.warnings, w.by())
	}
	w.fallback(&nfnl.KernelError{Op: "ipv4 rule", Err: unix.EINVAL})
	if len(w.warnings) != 1 || !strings.Contains(w.warnings[0], "invalid argument") {
		t.Errorf("warnings %q, want the refusal", w.warnings)
	}
}
