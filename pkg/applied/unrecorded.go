package applied

import (
	"errors"
	"fmt"

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
	// OtherErr: the read as the other kind of writer failed, and was
	// taken as holding nothing (ReadUnrecorded without otherFirst).
	OtherErr error
}

// ErrUnreadWhereFound marks ReadUnrecorded's error when, read first
// (otherFirst), the other kind of writer's read failed and the node's
// kind does not hold the rules.
var ErrUnreadWhereFound = errors.New("cannot read the rules where they were last found")

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
// it. A read with node's writer that fails is the error. otherFirst reads
// the other kind first (the audit's, for a sandbox whose rules it last
// found there): a writer's read of a sandbox it holds nothing of can cost
// several processes (iptables-save in both backends). A read of the other
// kind that fails is the error too when otherFirst (ErrUnreadWhereFound:
// the sandbox held that kind, and a failed read is not a sandbox without
// its rules, whose repair or report would follow) unless the node's kind
// holds the model; without otherFirst it holds nothing (the node may lack
// that kind), and Held.OtherErr says why.
func ReadUnrecorded(check func(Writer, iptables.Model) ([]string, error), node Writer, d decision.Decision, s decision.NodeSettings, m iptables.Model, otherFirst bool) (Held, error) {
	var earlier *iptables.Model
	if e, differs := decision.EarlierRules(d, s, m.V4 != nil, m.V6 != nil); differs {
		earlier = &e
	}
	other := node.OtherKind()
	readOther := !other.Native || m.V6 != nil || s.IPv6 != decision.IPv6DualStackOnly
	var otherErr error // the other kind's read, read first, failed
	if otherFirst && readOther {
		h, ok, err := holds(check, other, m, earlier)
		if ok {
			return h, nil
		}
		if err != nil {
			otherErr = fmt.Errorf("%w, as %s: %w", ErrUnreadWhereFound, other.Kind(), err)
		}
	}
	diffs, err := check(node, m)
	switch {
	case err != nil:
		return Held{Diffs: diffs, Model: m, By: node}, joinErr(err, otherErr)
	case len(diffs) == 0:
		return Held{Model: m, By: node}, nil
	}
	if earlier != nil {
		e, err := check(node, *earlier)
		if err != nil {
			return Held{Diffs: diffs, Model: m, By: node}, joinErr(err, otherErr)
		}
		if len(e) == 0 {
			return Held{Model: *earlier, Earlier: true, By: node}, nil
		}
	}
	if otherErr != nil {
		return Held{Diffs: diffs, Model: m, By: node}, otherErr
	}
	held := Held{Diffs: diffs, Model: m, By: node}
	if !otherFirst && readOther {
		h, ok, err := holds(check, other, m, earlier)
		if ok {
			return h, nil
		}
		held.OtherErr = err
	}
	return held, nil
}

// holds is what w holds whole of m, else of earlier, and the first read
// that failed.
func holds(check func(Writer, iptables.Model) ([]string, error), w Writer, m iptables.Model, earlier *iptables.Model) (Held, bool, error) {
	d, err := check(w, m)
	if err == nil && len(d) == 0 {
		return Held{Model: m, By: w}, true, nil
	}
	if earlier != nil {
		d, eerr := check(w, *earlier)
		if eerr == nil && len(d) == 0 {
			return Held{Model: *earlier, Earlier: true, By: w}, true, nil
		}
		if err == nil {
			err = eerr
		}
	}
	return Held{}, false, err
}

// joinErr is err, and then otherErr where set, on one line (a log
// field, inspect's report).
func joinErr(err, otherErr error) error {
	if otherErr == nil {
		return err
	}
	return fmt.Errorf("%w; %w", err, otherErr)
}
