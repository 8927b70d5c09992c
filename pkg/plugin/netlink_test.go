package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
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
	v4 := iptables.IPv4
	fakeRestore(t, release.Layout)
	cache := t.TempDir()
	if err := newNetlinkWriter(conf(cache, xtables.NFT), nil).usable(v4); err != nil {
		t.Errorf("iptables-nft %s: %v, want netlink", release.Layout, err)
	}
	if _, err := os.Stat(filepath.Join(cache, "iptables-nft-restore.version")); err != nil {
		t.Errorf("the version was not cached: %v", err)
	}
	for name, c := range map[string]*Config{
		"no cache_dir": conf("", xtables.NFT),
		"legacy":       conf(cache, xtables.Legacy),
	} {
		if err := newNetlinkWriter(c, nil).usable(v4); !errors.Is(err, errNetlinkOff) {
			t.Errorf("%s: %v, want netlink off", name, err)
		}
	}
	fakeRestore(t, "1.8.10")
	if err := newNetlinkWriter(conf(t.TempDir(), xtables.NFT), nil).usable(v4); !errors.Is(err, errNetlinkOff) || !strings.Contains(err.Error(), "1.8.10") {
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

// With backend auto, each family follows its own alternative: ip6tables
// on legacy keeps IPv6 off netlink while IPv4 uses it.
func TestNetlinkWriterDecidesPerFamily(t *testing.T) {
	dir := t.TempDir()
	nft := "#!/bin/sh\necho 'iptables-restore v" + release.Layout + " (nf_tables)'\n"
	for name, target := range map[string]string{"iptables-restore": "xtables-nft-multi", "ip6tables-restore": "xtables-legacy-multi"} {
		if err := os.WriteFile(filepath.Join(dir, target), []byte(nft), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	c := &Config{}
	c.CacheDir, c.parsed.Backend = t.TempDir(), xtables.Auto
	w := newNetlinkWriter(c, nil)
	if err := w.usable(iptables.IPv4); err != nil {
		t.Errorf("ipv4 on nft: %v, want netlink", err)
	}
	if err := w.usable(iptables.IPv6); !errors.Is(err, errNetlinkOff) {
		t.Errorf("ipv6 on legacy: %v, want netlink off", err)
	}
}
