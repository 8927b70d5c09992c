package applied

import (
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
)

// Held is what a sandbox no record names a writer for was found holding.
type Held struct {
	// Diffs are how the sandbox differs from the model as the node's
	// writer writes it; nil: it holds Model, as By writes it.
	Diffs []string
	Model iptables.Model
	// Earlier: Model is the rules an earlier build wrote for the pod's
	// settings (decision.EarlierRules).
	Earlier bool
	By      Writer
}

// ReadUnrecorded reads a sandbox no record names a writer for, as CHECK,
// the audit and inspect all read one: it holds the pod's model m (d's,
// with the node's settings s), or what an earlier build wrote for the
// same settings, as node (the node's writer, Guess()ed) or
// node.OtherKind() writes them. A pod upstream's istio-cni started holds
// either kind, as its global.nativeNftables said, which a switch may have
// changed. Native nftables' inet table captures IPv6 whatever the model
// says, so under ipv6_redirect: dual-stack-only a model without IPv6
// (which sends the pod's IPv6 direct) is not taken as held by native
// tables of the other kind. check reads the sandbox as a writer wrote
// it. A read with node's writer that fails is the error; one with the
// other kind holds nothing (the node may lack that kind: a repair then
// leaves the node's kind). otherFirst reads the other kind first (the
// audit's, for a sandbox whose rules it last found there): a writer's read
// of a sandbox it holds nothing of can cost several processes
// (iptables-save in both backends).
func ReadUnrecorded(check func(Writer, iptables.Model) ([]string, error), node Writer, d decision.Decision, s decision.NodeSettings, m iptables.Model, otherFirst bool) (Held, error) {
	var earlier *iptables.Model
	if e, differs := decision.EarlierRules(d, s, m.V4 != nil, m.V6 != nil); differs {
		earlier = &e
	}
	other := node.OtherKind()
	readOther := !other.Native || m.V6 != nil || s.IPv6 != decision.IPv6DualStackOnly
	if otherFirst && readOther {
		if h, ok := holds(check, other, m, earlier); ok {
			return h, nil
		}
	}
	diffs, err := check(node, m)
	if err != nil || len(diffs) == 0 {
		return Held{Diffs: diffs, Model: m, By: node}, err
	}
	if earlier != nil {
		d, err := check(node, *earlier)
		if err != nil {
			return Held{Diffs: diffs, Model: m, By: node}, err
		}
		if len(d) == 0 {
			return Held{Model: *earlier, Earlier: true, By: node}, nil
		}
	}
	if !otherFirst && readOther {
		if h, ok := holds(check, other, m, earlier); ok {
			return h, nil
		}
	}
	return Held{Diffs: diffs, Model: m, By: node}, nil
}

// holds is what w holds whole of m, else of earlier; a read that fails
// holds nothing.
func holds(check func(Writer, iptables.Model) ([]string, error), w Writer, m iptables.Model, earlier *iptables.Model) (Held, bool) {
	if d, err := check(w, m); err == nil && len(d) == 0 {
		return Held{Model: m, By: w}, true
	}
	if earlier != nil {
		if d, err := check(w, *earlier); err == nil && len(d) == 0 {
			return Held{Model: *earlier, Earlier: true, By: w}, true
		}
	}
	return Held{}, false
}
