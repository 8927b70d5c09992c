package applied

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
)

// SameSpec compares two specs as recorded (an empty list and none are the
// same).
func SameSpec(a, b iptables.Spec) bool {
	ja, errA := json.Marshal(normalize(a))
	jb, errB := json.Marshal(normalize(b))
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// SameSettings says whether a recorded spec is what the pod's settings
// give now (now): the same spec, or the one an earlier build decided from
// them (decision.EarlierSpec), which its records hold. (An edit since
// that changed only whether the annotation lists 15020 passes for none.)
func SameSettings(recorded, now iptables.Spec) bool {
	earlier, differs := decision.EarlierSpec(now)
	return SameSpec(recorded, now) || differs && SameSpec(recorded, earlier)
}

// SpecDiff names the fields that differ, with both values, for messages:
// "OutboundIPExclude [] -> [\"0.0.0.0/0\"]".
func SpecDiff(was, now iptables.Spec) string {
	var mw, mn map[string]json.RawMessage
	jw, _ := json.Marshal(normalize(was))
	jn, _ := json.Marshal(normalize(now))
	if json.Unmarshal(jw, &mw) != nil || json.Unmarshal(jn, &mn) != nil {
		return "the spec"
	}
	var out []string
	for k, v := range mn {
		if !bytes.Equal(v, mw[k]) {
			out = append(out, fmt.Sprintf("%s %s -> %s", k, mw[k], v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// normalize makes nil and empty lists alike.
func normalize(s iptables.Spec) iptables.Spec {
	s.InboundPorts.List = orEmpty(s.InboundPorts.List)
	s.InboundExclude = orEmpty(s.InboundExclude)
	s.OutboundPorts = orEmpty(s.OutboundPorts)
	s.OutboundExclude = orEmpty(s.OutboundExclude)
	s.OutboundIPs.List = orEmpty(s.OutboundIPs.List)
	s.OutboundIPExclude = orEmpty(s.OutboundIPExclude)
	s.ExcludeInterfaces = orEmpty(s.ExcludeInterfaces)
	s.RerouteInterfaces = orEmpty(s.RerouteInterfaces)
	return s
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
