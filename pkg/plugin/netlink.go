package plugin

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// errNetlinkOff: a family's rules go in with iptables-restore.
var errNetlinkOff = errors.New("netlink writer off")

// netlinkOff returns the layout a family's rules go over netlink in
// (pkg/iptables/nfnl), or says why they cannot: they can where the
// family's iptables is nf_tables at a release nfnl lays out, so that the
// node's iptables-save, and the agent's, print them as iptables-restore's.
// The two families are separate alternatives on Debian and Ubuntu, so
// each resolves on its own.
func netlinkOff(conf *Config, f iptables.Family) (nfnl.Layout, error) {
	l, err := xtables.NetlinkWritable(conf.parsed.Backend, f, conf.CacheDir, true)
	if err != nil {
		return l, fmt.Errorf("%w: %w", errNetlinkOff, err)
	}
	return l, nil
}

// netlinkFamilies are the planned families the plugin writes over
// netlink, each in its release's layout.
func netlinkFamilies(conf *Config, pl plan) map[iptables.Family]nfnl.Layout {
	families := map[iptables.Family]nfnl.Layout{}
	for f, wanted := range map[iptables.Family]bool{iptables.IPv4: pl.v4, iptables.IPv6: pl.v6} {
		if !wanted {
			continue
		}
		if l, err := netlinkOff(conf, f); err == nil {
			families[f] = l
		}
	}
	return families
}

// rulesBy says what first wrote the rules, for the log line: "netlink",
// "x_tables" (the legacy replaces), "iptables-restore" or, for a
// dual-stack pod, two of them. A reconcile after a read-back always uses
// iptables-restore.
func rulesBy(written map[iptables.Family]xtables.Written) string {
	var netlink, replaced, restore bool
	for _, w := range written {
		netlink, replaced = netlink || w.Netlink, replaced || w.Replaced
		restore = restore || (!w.Netlink && !w.Replaced)
	}
	var by []string
	for _, b := range []struct {
		did  bool
		name string
	}{{netlink, "netlink"}, {replaced, "x_tables"}, {restore || len(written) == 0, "iptables-restore"}} {
		if b.did {
			by = append(by, b.name)
		}
	}
	return strings.Join(by, ",")
}

// writeWarnings are the refusals worth a warning: iptables-restore wrote
// instead. A sandbox already holding our rules (a repeated ADD), and one
// in the pod's own user namespace, are expected.
func writeWarnings(written map[iptables.Family]xtables.Written) []string {
	var warnings []string
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		err := written[f].Refused
		if err == nil || errors.Is(err, unix.EEXIST) || errors.Is(err, legacy.ErrNotFresh) || errors.Is(err, xtables.ErrUserNS) {
			continue
		}
		warnings = append(warnings, "rules written by iptables-restore after the agent's or plugin's own write failed: "+err.Error())
	}
	return warnings
}
