package podnet

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// TPROXY'd packets are addressed to the client's original destination, not
// to this pod: the policy route delivers packets carrying the mark to lo,
// as `ip rule add fwmark M lookup T` and `ip route add local default dev lo
// table T` do (istio-iptables' configureTProxyRoutes).

func netlinkFamily(f iptables.Family) int {
	if f == iptables.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func defaultDst(f iptables.Family) *net.IPNet {
	if f == iptables.IPv6 {
		return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
}

func localDefault(f iptables.Family, lo netlink.Link, table uint32) *netlink.Route {
	return &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: defaultDst(f), Table: int(table),
		Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST, Family: netlinkFamily(f)}
}

// addPolicyRoute installs the rule and the route; both are idempotent. lo
// is brought up first, as the runtime's loopback setup does: an IPv6 local
// route on a down lo is refused, and the runtime may not be done yet.
func addPolicyRoute(f iptables.Family, r *iptables.PolicyRoute) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	if ok, err := hasPolicyRule(f, r); err != nil {
		return err
	} else if !ok {
		rule := netlink.NewRule()
		rule.Family, rule.Mark, rule.Table = netlinkFamily(f), r.Mark, int(r.Table)
		if err := netlink.RuleAdd(rule); err != nil {
			return fmt.Errorf("%s: ip rule fwmark %#x lookup %d: %w", f, r.Mark, r.Table, err)
		}
	}
	if err := netlink.RouteReplace(localDefault(f, lo, r.Table)); err != nil {
		return fmt.Errorf("%s: local default route dev lo table %d: %w", f, r.Table, err)
	}
	return nil
}

func hasPolicyRule(f iptables.Family, r *iptables.PolicyRoute) (bool, error) {
	rules, err := netlink.RuleListFiltered(netlinkFamily(f), &netlink.Rule{Mark: r.Mark, Table: int(r.Table)},
		netlink.RT_FILTER_MARK|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("%s: listing ip rules: %w", f, err)
	}
	return slices.ContainsFunc(rules, plainFwmark), nil
}

// plainFwmark: "fwmark M lookup T" and nothing else. A rule with a partial
// mask, an inversion or another selector does not route our packets, and
// is not ours to remove.
func plainFwmark(r netlink.Rule) bool {
	return r.Mark != 0 && !r.Invert && (r.Mask == nil || *r.Mask == 0xffffffff) &&
		r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" && r.Goto <= 0 &&
		r.Dport == nil && r.Sport == nil && r.UIDRange == nil && r.IPProto == 0 && r.Tos == 0
}

// localDefaultOnLo: "local default dev lo", no gateway. (IPv6 reports no
// route scope, so the scope is not compared.)
func localDefaultOnLo(rt netlink.Route, lo netlink.Link) bool {
	return (rt.Dst == nil || isDefault(rt.Dst)) && rt.LinkIndex == lo.Attrs().Index && rt.Gw == nil
}

// policyRouteDiffs says what of the policy routing is missing.
func policyRouteDiffs(f iptables.Family, r *iptables.PolicyRoute) ([]string, error) {
	var out []string
	if ok, err := hasPolicyRule(f, r); err != nil {
		return nil, err
	} else if !ok {
		out = append(out, fmt.Sprintf("%s: ip rule fwmark %#x lookup %d missing", f, r.Mark, r.Table))
	}
	ok, err := hasLocalDefault(f, int(r.Table))
	if err != nil {
		return nil, err
	}
	if !ok {
		out = append(out, fmt.Sprintf("%s: route local default dev lo table %d missing", f, r.Table))
	}
	return out, nil
}

func hasLocalDefault(f iptables.Family, table int) (bool, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return false, fmt.Errorf("finding lo: %w", err)
	}
	routes, err := netlink.RouteListFiltered(netlinkFamily(f), &netlink.Route{Table: table, Type: unix.RTN_LOCAL},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
	if err != nil {
		return false, fmt.Errorf("%s: listing routes of table %d: %w", f, table, err)
	}
	return slices.ContainsFunc(routes, func(rt netlink.Route) bool { return localDefaultOnLo(rt, lo) }), nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// removePolicyRoutes removes what TPROXY's routing leaves, without the
// model (DEL has none): every "local default dev lo" route outside the
// kernel's local table, and every plain "fwmark M lookup T" rule whose
// table held such a route or holds no route at all (a rule whose route is
// already gone, after a failed ADD). Nothing else of the namespace's
// routing is touched.
func removePolicyRoutes(families ...iptables.Family) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	var errs []error
	for _, f := range families {
		routes, err := netlink.RouteListFiltered(netlinkFamily(f), &netlink.Route{Table: unix.RT_TABLE_UNSPEC},
			netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: listing routes: %w", f, err))
			continue
		}
		ours, used := map[int]bool{}, map[int]bool{}
		for _, rt := range routes {
			if rt.Table == unix.RT_TABLE_LOCAL || rt.Type != unix.RTN_LOCAL || !localDefaultOnLo(rt, lo) {
				used[rt.Table] = true
				continue
			}
			ours[rt.Table] = true
			if err := netlink.RouteDel(&rt); err != nil {
				errs = append(errs, fmt.Errorf("%s: deleting local default route of table %d: %w", f, rt.Table, err))
			}
		}
		rules, err := netlink.RuleList(netlinkFamily(f))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: listing ip rules: %w", f, err))
			continue
		}
		for _, rule := range rules {
			leftover := ours[rule.Table] || !used[rule.Table]
			if !plainFwmark(rule) || rule.Table <= 0 || !leftover {
				continue
			}
			if err := netlink.RuleDel(&rule); err != nil {
				errs = append(errs, fmt.Errorf("%s: deleting ip rule fwmark %#x lookup %d: %w", f, rule.Mark, rule.Table, err))
			}
		}
	}
	return errors.Join(errs...)
}
