package podnet

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// A Network with Native writes upstream's native nftables ruleset
// (pkg/iptables/nftables) instead of iptables rules: one inet ruleset for both
// families, written in one nf_tables transaction and read back over
// netlink by this process in the pod's namespace (nfnl). It needs no
// iptables and no nft on the node, and no hop into a pod's own user
// namespace: nf_tables matches skuid and skgid as the namespace's owner
// sees them, whoever wrote the rule (unlike xt_owner).

func nativeOf(m iptables.Model) *nftables.Ruleset {
	rs := nftables.Of(m)
	return &rs
}

func familiesOf(m iptables.Model) []iptables.Family {
	var fs []iptables.Family
	for _, rs := range m.Rulesets() {
		fs = append(fs, rs.Family)
	}
	return fs
}

// programNative is Program for native nftables: the ruleset, TPROXY's
// policy routes and ::6 in, then read back unless w.Trusted; a failure
// removes them unless w.Only (the agent hands the ADD back, and the
// plugin reconciles).
func (n *Network) programNative(ctx context.Context, path string, m iptables.Model, w xtables.Write) (map[iptables.Family]xtables.Written, error) {
	rs := nativeOf(m)
	err := n.do(path, func(*xtables.Programmer) error {
		if w.Late() {
			// The agent's shim stopped waiting: the plugin writes.
			return fmt.Errorf("native rules not written: %w", xtables.ErrLate)
		}
		if m.V6 != nil {
			if err := addPassthroughV6(); err != nil {
				return err
			}
		}
		if err := nfnl.WriteNative(rs); err != nil {
			return err
		}
		if rs.Route != nil {
			for _, f := range familiesOf(m) {
				if err := addPolicyRoute(f, rs.Route); err != nil {
					return err
				}
			}
		}
		if w.Trusted {
			// As for iptables (xtables.Write.Trusted): the transaction
			// went in whole, and the agent's audit reads it back, off
			// the pod's start.
			return nil
		}
		diffs, err := nfnl.DiffNative(rs)
		if err != nil {
			return fmt.Errorf("reading the nftables rules back: %w", err)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("the nftables rules read back differ: %s", strings.Join(diffs, "; "))
		}
		return nil
	})
	written := map[iptables.Family]xtables.Written{}
	for _, f := range familiesOf(m) {
		written[f] = xtables.Written{Netlink: true}
	}
	if err == nil || w.Only {
		return written, err
	}
	rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackBudget)
	defer cancel()
	if rbErr := n.cleanupNative(rbCtx, path); rbErr != nil {
		err = errors.Join(err, fmt.Errorf("rolling back: %w", rbErr))
	}
	return written, err
}

// checkNative is Check for native nftables.
func (n *Network) checkNative(path string, m iptables.Model) ([]string, error) {
	rs := nativeOf(m)
	var diffs []string
	err := n.do(path, func(*xtables.Programmer) error {
		var err error
		if diffs, err = nfnl.DiffNative(rs); err != nil {
			return fmt.Errorf("reading the nftables rules: %w", err)
		}
		routed := map[iptables.Family]*iptables.PolicyRoute{}
		for _, f := range familiesOf(m) {
			routed[f] = rs.Route
		}
		d, err := routeAndAddressDiffs(routed, m.V6 != nil)
		diffs = append(diffs, d...)
		return err
	})
	return diffs, err
}

// cleanupNative removes our tables and TPROXY's policy routes. It runs
// no iptables: a native node may have none.
func (n *Network) cleanupNative(_ context.Context, path string) error {
	return n.do(path, func(*xtables.Programmer) error {
		return errors.Join(nfnl.DeleteNative(), removePolicyRoutes(iptables.IPv4, iptables.IPv6))
	})
}
