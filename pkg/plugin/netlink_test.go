package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
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

func TestNetlinkOffDecides(t *testing.T) {
	conf := func(cacheDir string, b release.Backend) *Config {
		c := &Config{}
		c.CacheDir, c.parsed.Backend = cacheDir, b
		return c
	}
	v4 := iptables.IPv4
	fakeRestore(t, "1.8.9")
	cache := t.TempDir()
	if l, err := netlinkOff(conf(cache, release.NFT), v4); err != nil || l.Release() != "1.8.9" {
		t.Errorf("iptables-nft 1.8.9: %q, %v; want netlink in 1.8.9's layout", l.Release(), err)
	}
	if _, err := os.Stat(filepath.Join(cache, "iptables-nft-restore.version")); err != nil {
		t.Errorf("the version was not cached: %v", err)
	}
	for name, c := range map[string]*Config{
		"no cache_dir": conf("", release.NFT),
		"legacy":       conf(cache, release.Legacy),
	} {
		if l, err := netlinkOff(c, v4); !errors.Is(err, errNetlinkOff) || l != (nfnl.Layout{}) {
			t.Errorf("%s: %q, %v; want netlink off", name, l.Release(), err)
		}
	}
	// Each release nfnl lays out goes over netlink in its own layout.
	for _, v := range []string{"1.8.7", "1.8.8", "1.8.10", "1.8.11", "1.8.12", "1.8.13"} {
		fakeRestore(t, v)
		if l, err := netlinkOff(conf(t.TempDir(), release.NFT), v4); err != nil || l.Release() != v {
			t.Errorf("iptables-nft %s: %q, %v; want netlink in %s's layout", v, l.Release(), err, v)
		}
	}
	for _, v := range []string{"1.8.6", "1.8.99"} {
		fakeRestore(t, v)
		if l, err := netlinkOff(conf(t.TempDir(), release.NFT), v4); !errors.Is(err, errNetlinkOff) || !strings.Contains(err.Error(), v) || l != (nfnl.Layout{}) {
			t.Errorf("iptables %s: %q, %v; want netlink off naming the release", v, l.Release(), err)
		}
	}
}

// Only an unexpected refusal is a warning; declining and a sandbox that
// already holds our chains are not.
func TestNetlinkFallbackWarnings(t *testing.T) {
	written := map[iptables.Family]xtables.Written{
		iptables.IPv4: {Refused: &nfnl.KernelError{Op: "ipv4 chain nat ISTIO_INBOUND", Err: unix.EEXIST}},
		iptables.IPv6: {},
	}
	if w := writeWarnings(written); len(w) != 0 || rulesBy(written) != "iptables-restore" {
		t.Errorf("warnings %q, by %q", w, rulesBy(written))
	}
	written[iptables.IPv6] = xtables.Written{Refused: &nfnl.KernelError{Op: "ipv6 rule", Err: unix.EINVAL}}
	if w := writeWarnings(written); len(w) != 1 || !strings.Contains(w[0], "invalid argument") {
		t.Errorf("warnings %q, want the refusal", w)
	}
	written[iptables.IPv4] = xtables.Written{Netlink: true}
	if by := rulesBy(written); by != "netlink,iptables-restore" {
		t.Errorf("by %q, want both", by)
	}
	// The legacy writer: a table not fresh is expected, a kernel's
	// refusal is not.
	written = map[iptables.Family]xtables.Written{
		iptables.IPv4: {Refused: fmt.Errorf("ipv4 nat table: %w", legacy.ErrNotFresh)},
		iptables.IPv6: {Replaced: true},
	}
	if w := writeWarnings(written); len(w) != 0 || rulesBy(written) != "x_tables,iptables-restore" {
		t.Errorf("warnings %q, by %q", w, rulesBy(written))
	}
	written[iptables.IPv4] = xtables.Written{Refused: fmt.Errorf("ipv4 nat table: replacing the nat table: %w", unix.EAGAIN)}
	if w := writeWarnings(written); len(w) != 1 || !strings.Contains(w[0], "resource temporarily unavailable") {
		t.Errorf("warnings %q, want the refusal", w)
	}
	written[iptables.IPv4] = xtables.Written{Replaced: true}
	if by := rulesBy(written); by != "x_tables" {
		t.Errorf("by %q, want x_tables", by)
	}
}

// With backend auto, each family follows its own alternative: ip6tables
// on legacy keeps IPv6 off netlink while IPv4 uses it.
func TestNetlinkOffPerFamily(t *testing.T) {
	dir := t.TempDir()
	nft := "#!/bin/sh\necho 'iptables-restore v1.8.9 (nf_tables)'\n"
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
	c.CacheDir, c.parsed.Backend = t.TempDir(), release.Auto
	if l, err := netlinkOff(c, iptables.IPv4); err != nil || l.Release() != "1.8.9" {
		t.Errorf("ipv4 on nft: %q, %v; want netlink in 1.8.9's layout", l.Release(), err)
	}
	if _, err := netlinkOff(c, iptables.IPv6); !errors.Is(err, errNetlinkOff) {
		t.Errorf("ipv6 on legacy: %v, want netlink off", err)
	}
	if got := netlinkFamilies(c, plan{v4: true, v6: true}); len(got) != 1 || got[iptables.IPv4].Release() != "1.8.9" {
		t.Errorf("netlinkFamilies = %v, want ipv4 only, in 1.8.9's layout", got)
	}
	if got := netlinkFamilies(c, plan{v6: true}); len(got) != 0 {
		t.Errorf("netlinkFamilies of an IPv6-only plan = %v, want none", got)
	}
}
