package plugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// versionCache is the file, in cache_dir, that remembers the node's
// iptables release.
const versionCache = "iptables-nft.version"

// errNetlinkOff declines the netlink writer: iptables-restore writes.
var errNetlinkOff = errors.New("netlink writer off")

// netlinkWriter writes an ADD's rules over netlink (pkg/iptables/nfnl)
// when the node's iptables is nf_tables at the release nfnl reproduces,
// so that the node's iptables-save, and the agent's, print them as
// iptables-restore's. It decides once per invocation and counts what each
// family's rules were written by, for the verb's log line.
type netlinkWriter struct {
	conf *Config
	once sync.Once
	off  error

	mu       sync.Mutex
	netlink  int
	restore  int
	warnings []string
}

func (w *netlinkWriter) usable() error {
	if w.conf.CacheDir == "" {
		return fmt.Errorf("%w: no cache_dir", errNetlinkOff)
	}
	b, err := w.conf.parsed.Backend.Resolve()
	if err != nil || b != xtables.NFT {
		return fmt.Errorf("%w: iptables backend %s (%w)", errNetlinkOff, b, err)
	}
	name := w.conf.parsed.Backend.CommandsFor(iptables.IPv4).Restore
	v, err := xtables.CachedNFTVersion(filepath.Join(w.conf.CacheDir, versionCache), name)
	if err != nil {
		return fmt.Errorf("%w: %w", errNetlinkOff, err)
	}
	if !nfnl.WritesLayoutOf(v) {
		return fmt.Errorf("%w: iptables %s writes another layout than %s", errNetlinkOff, v, nfnl.Layout)
	}
	return nil
}

// write is xtables.Programmer.Netlink.
func (w *netlinkWriter) write(rs *iptables.Ruleset) error {
	w.once.Do(func() { w.off = w.usable() })
	if w.off != nil {
		return w.off
	}
	err := nfnl.Write(rs)
	if err == nil {
		w.mu.Lock()
		w.netlink++
		w.mu.Unlock()
	}
	return err
}

// fallback is xtables.Programmer.NetlinkFallback. Declining, and a
// sandbox already holding our chains (a repeated ADD), are expected; any
// other refusal is worth a warning: iptables-restore wrote instead.
func (w *netlinkWriter) fallback(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.restore++
	if errors.Is(err, errNetlinkOff) || errors.Is(err, unix.EEXIST) {
		return
	}
	w.warnings = append(w.warnings, "rules written by iptables-restore after netlink failed: "+err.Error())
}

// by says what wrote the rules: "netlink", "iptables-restore" or both.
func (w *netlinkWriter) by() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.netlink > 0 && w.restore > 0:
		return "netlink,iptables-restore"
	case w.netlink > 0:
		return "netlink"
	}
	return "iptables-restore"
}
