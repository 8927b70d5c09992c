package decision

import (
	"fmt"
	"net/netip"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// NodeSettings are the node-wide values a pod's rules depend on besides the
// pod itself: the plugin's tproxy_mark, tproxy_route_table and
// ipv6_redirect.
type NodeSettings struct {
	TProxyMark, TProxyTable uint32
	IPv6                    IPv6Policy
}

// DefaultNodeSettings are the plugin's defaults.
func DefaultNodeSettings() NodeSettings {
	return NodeSettings{TProxyMark: iptables.DefaultTProxyMark, TProxyTable: iptables.DefaultTProxyTable, IPv6: IPv6Always}
}

// IPv6Policy is the plugin's ipv6_redirect: whether a pod with IPv6 but no
// dual-stack proxy gets IPv6 rules.
type IPv6Policy string

const (
	// IPv6Always captures IPv6 whenever the pod has it: no connection
	// leaves outside the mesh, and those a proxy listening on IPv4 only
	// cannot take are refused. The default.
	IPv6Always IPv6Policy = "always"
	// IPv6DualStackOnly captures IPv6 only for a dual-stack proxy
	// (ISTIO_DUAL_STACK) or an IPv6-first pod, as upstream does: an
	// IPv4-only proxy's pod then reaches IPv6 destinations directly,
	// outside the mesh.
	IPv6DualStackOnly IPv6Policy = "dual-stack-only"
)

// IPv6Policies lists the valid values, for error messages.
const IPv6Policies = "always or dual-stack-only"

// ParseIPv6Policy validates ipv6_redirect; "" is IPv6Always.
func ParseIPv6Policy(s string) (IPv6Policy, error) {
	switch p := IPv6Policy(s); p {
	case "":
		return IPv6Always, nil
	case IPv6Always, IPv6DualStackOnly:
		return p, nil
	}
	return "", fmt.Errorf("unknown value %q: want %s", s, IPv6Policies)
}

// Stack is the families a redirected pod gets rules for.
type Stack struct {
	V4, V6 bool
	// IPv4OnlyProxy: IPv6 is captured, but nothing says the proxy
	// listens on IPv6 (no ISTIO_DUAL_STACK, and the pod is IPv4-first, so
	// Envoy binds 0.0.0.0): the pod's IPv6 connections will be refused.
	// The plugin, the agent and inspect say so (IPv6ProxyNote).
	IPv4OnlyProxy bool
}

// IPv6ProxyNote is what is said of a pod whose Stack has IPv4OnlyProxy.
const IPv6ProxyNote = "IPv6 egress is captured but the sidecar listens on IPv4 only; set ISTIO_DUAL_STACK=true on the proxy, or ipv6_redirect: dual-stack-only"

// Families says which address families a redirected pod needs rules for:
// IPv4 always. IPv6 when the proxy is dual-stack (ISTIO_DUAL_STACK) or the
// pod is IPv6-first (its first address is IPv6: Envoy then binds [::]);
// otherwise, with IPv6Always, when one of the pod's known addresses is
// IPv6 or its namespace has a global IPv6 address (a primary CNI that
// reports fewer addresses than it configured must not let IPv6 bypass the
// proxy). hasIPv6 is asked only in that last case. addrs are in the pod's
// order (the primary's result, the pod's status.podIPs).
func Families(policy IPv6Policy, dualStack bool, addrs []netip.Addr, hasIPv6 func() (bool, error)) (Stack, error) {
	if dualStack || (len(addrs) > 0 && addrs[0].Unmap().Is6()) {
		return Stack{V4: true, V6: true}, nil
	}
	if policy == IPv6DualStackOnly {
		return Stack{V4: true}, nil
	}
	v6 := false
	for _, a := range addrs {
		if a.Unmap().Is6() {
			v6 = true
		}
	}
	if !v6 {
		var err error
		if v6, err = hasIPv6(); err != nil {
			return Stack{}, err
		}
	}
	return Stack{V4: true, V6: v6, IPv4OnlyProxy: v6}, nil
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

// Rules is what a redirected pod must hold, for the node audit and inspect
// when no record of its ADD is left. ADD builds the same model from the
// same FinalSpec, which it records (pkg/applied): iptables.Build is the
// one computation of rules from a spec.
func Rules(d Decision, node NodeSettings, v4, v6 bool) iptables.Model {
	return iptables.Build(FinalSpec(d, node), v4, v6)
}
