package plugin

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// errNetlinkOff declines the netlink writer: iptables-restore writes.
var errNetlinkOff = errors.New("netlink writer off")

// netlinkWriter writes an ADD's rules over netlink (pkg/iptables/nfnl)
// for each family whose iptables is nf_tables at the release nfnl
// reproduces, so that the node's iptables-save, and the agent's, print
// them as iptables-restore's. It decides once per family and invocation,
// and counts what wrote each family's rules, for the verb's log line.
type netlinkWriter struct {
	cacheDir string
	backend  xtables.Backend
	// decide says why a family cannot go over netlink, or nil: usable,
	// or the agent's findings when it runs the ADD.
	decide func(iptables.Family) error

	mu       sync.Mutex
	off      map[iptables.Family]error // decided families
	netlink  int
	restore  int
	warnings []string
}

// newNetlinkWriter returns the writer for one ADD; decide, when not nil,
// replaces usable (the agent decides from the shim's findings).
func newNetlinkWriter(conf *Config, decide func(iptables.Family) error) *netlinkWriter {
	w := &netlinkWriter{cacheDir: conf.CacheDir, backend: conf.parsed.Backend, off: map[iptables.Family]error{}, decide: decide}
	if w.decide == nil {
		w.decide = w.usable
	}
	return w
}

// use is the xtables.Write that writes through w (Write's fields say
// what trusted and only mean).
func (w *netlinkWriter) use(trusted, only bool) xtables.Write {
	return xtables.Write{Netlink: w.write, Declined: w.fallback, Trusted: trusted, Only: only}
}

// usable says why a family's rules cannot go over netlink, or nil. The
// two families are separate alternatives on Debian and Ubuntu, so each
// resolves on its own.
func (w *netlinkWriter) usable(f iptables.Family) error {
	if err := xtables.NetlinkWritable(w.backend, f, w.cacheDir, true); err != nil {
		return fmt.Errorf("%w: %w", errNetlinkOff, err)
	}
	return nil
}

// write is xtables.Write.Netlink; the families call it at once.
func (w *netlinkWriter) write(rs *iptables.Ruleset) error {
	w.mu.Lock()
	off, decided := w.off[rs.Family]
	w.mu.Unlock()
	if !decided {
		off = w.decide(rs.Family)
		w.mu.Lock()
		w.off[rs.Family] = off
		w.mu.Unlock()
	}
	if off != nil {
		return off
	}
	err := nfnl.Write(rs)
	if err == nil {
		w.mu.Lock()
		w.netlink++
		w.mu.Unlock()
	}
	return err
}

// fallback is xtables.Write.Declined. Declining, and a
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

// by says what first wrote the rules: "netlink", "iptables-restore" or,
// for a dual-stack pod, both. A reconcile after a read-back always uses
// iptables-restore.
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
