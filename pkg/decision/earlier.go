package decision

import (
	"slices"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// EarlierSpec is the spec builds before this one decided from the
// settings that give now, and whether it differs: they excluded the
// proxy's status port outbound whatever excludeOutboundPorts said, where
// upstream istio-cni, and this build, take the annotation, once set, as
// the whole list. A sandbox such a build redirected holds it: its record
// says so, or, with no record (records go with an uninstall), its rules
// do, and the audit, inspect and CHECK take them for the pod's.
func EarlierSpec(now iptables.Spec) (iptables.Spec, bool) {
	if slices.Contains(now.OutboundExclude, iptables.ProxyStatusPort) {
		return now, false
	}
	now.OutboundExclude = append(slices.Clone(now.OutboundExclude), iptables.ProxyStatusPort)
	return now, true
}

// EarlierRules is what a sandbox an earlier build redirected holds, when
// it differs from Rules (EarlierSpec).
func EarlierRules(d Decision, node NodeSettings, v4, v6 bool) (iptables.Model, bool) {
	spec, differs := EarlierSpec(FinalSpec(d, node))
	if !differs {
		return iptables.Model{}, false
	}
	return iptables.Build(spec, v4, v6), true
}
