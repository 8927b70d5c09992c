package decision

import (
	"net/netip"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// NodeSettings are the node-wide values a pod's rules depend on besides the
// pod itself: the plugin's tproxy_mark and tproxy_route_table.
type NodeSettings struct {
	TProxyMark, TProxyTable uint32
}

// DefaultNodeSettings are the plugin's defaults.
func DefaultNodeSettings() NodeSettings {
	return NodeSettings{TProxyMark: iptables.DefaultTProxyMark, TProxyTable: iptables.DefaultTProxyTable}
}

// Families says which address families a redirected pod needs rules for:
// IPv4 always; IPv6 when dual-stack is asked for, when one of the pod's
// known addresses is IPv6, or when its namespace has a global IPv6 address
// (a primary CNI that reports fewer addresses than it configured must not
// let IPv6 bypass the proxy). hasIPv6 is asked only in the last case.
func Families(dualStack bool, addrs []netip.Addr, hasIPv6 func() (bool, error)) (v4, v6 bool, err error) {
	if dualStack {
		return true, true, nil
	}
	for _, a := range addrs {
		if a.Unmap().Is6() {
			return true, true, nil
		}
	}
	v6, err = hasIPv6()
	return true, v6, err
}

// FamilyNames names the families as the logs and reports do.
func FamilyNames(v4, v6 bool) string {
	switch {
	case v4 && v6:
		return "ipv4,ipv6"
	case v6:
		return "ipv6"
	}
	return "ipv4"
}

// FinalSpec is a redirected pod's spec with the node's settings: what ADD
// programs and records (pkg/applied).
func FinalSpec(d Decision, node NodeSettings) iptables.Spec {
	spec := d.Spec
	spec.TProxyMark, spec.TProxyTable = node.TProxyMark, node.TProxyTable
	return spec
}

// Rules is what a redirected pod must hold: the one computation ADD, CHECK,
// the node audit and inspect share.
func Rules(d Decision, node NodeSettings, v4, v6 bool) iptables.Model {
	return iptables.Build(FinalSpec(d, node), v4, v6)
}
