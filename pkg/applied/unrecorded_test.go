package applied

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// excluding5432 is a pod whose excludeOutboundPorts is 5432: an earlier
// build's rules for it also excluded the status port.
func excluding5432() decision.Decision {
	spec := iptables.DefaultSpec()
	spec.OutboundExclude = []uint16{5432}
	return decision.Decision{Redirect: true, Spec: spec}
}

// TestReadUnrecorded: a sandbox no record names a writer for holds the
// model or an earlier build's rules, as the node's writer or the other
// kind writes them; the node's differences stand when neither does. A
// read with the node's writer that fails is the error; one with the other
// kind only where the sandbox was last found holding that kind (first)
// and the node's does not hold the model: otherwise the node may lack
// that kind, and it holds nothing (OtherErr says why).
func TestReadUnrecorded(t *testing.T) {
	node := Writer{Backend: release.NFT, Guessed: true}
	other := node.OtherKind()
	s := decision.DefaultNodeSettings()
	d := excluding5432()
	m := decision.Rules(d, s, true, false)
	earlier, _ := decision.EarlierRules(d, s, true, false)
	boom := errors.New("iptables-save: exit status 1")
	for _, tc := range []struct {
		name  string
		d     decision.Decision
		holds map[bool]*iptables.Model // by Native; nil: nothing of ours
		fails map[bool]bool            // the read with that kind fails
		first bool                     // otherFirst
		want  Held
		err   error // errors.Is
	}{
		{"the node's", d, map[bool]*iptables.Model{false: &m}, nil, false, Held{Model: m, By: node}, nil},
		{"the node's, an earlier build's", d, map[bool]*iptables.Model{false: &earlier}, nil, false, Held{Model: earlier, Earlier: true, By: node}, nil},
		{"the other kind's", d, map[bool]*iptables.Model{true: &m}, nil, false, Held{Model: m, By: other}, nil},
		{"the other kind's, an earlier build's", d, map[bool]*iptables.Model{true: &earlier}, nil, false, Held{Model: earlier, Earlier: true, By: other}, nil},
		{"neither", d, nil, nil, false, Held{Diffs: []string{"missing"}, Model: m, By: node}, nil},
		{"the node's read fails", d, map[bool]*iptables.Model{true: &m}, map[bool]bool{false: true}, false, Held{}, boom},
		{"the other kind's read fails", d, nil, map[bool]bool{true: true}, false, Held{Diffs: []string{"missing"}, Model: m, By: node, OtherErr: boom}, nil},
		{"the other kind's read fails where last found", d, nil, map[bool]bool{true: true}, true, Held{}, ErrUnreadWhereFound},
		{"the other kind's read fails where last found, the node's holds", d, map[bool]*iptables.Model{false: &m}, map[bool]bool{true: true}, true, Held{Model: m, By: node}, nil},
		{"the other kind's read fails where last found, the node's holds an earlier build's", d, map[bool]*iptables.Model{false: &earlier}, map[bool]bool{true: true}, true, Held{Model: earlier, Earlier: true, By: node}, nil},
		{"both reads fail where last found", d, nil, map[bool]bool{true: true, false: true}, true, Held{}, ErrUnreadWhereFound},
	} {
		check := func(w Writer, want iptables.Model) ([]string, error) {
			if tc.fails[w.Native] {
				return nil, boom
			}
			if h := tc.holds[w.Native]; h != nil && reflect.DeepEqual(*h, want) {
				return nil, nil
			}
			return []string{"missing"}, nil
		}
		got, err := ReadUnrecorded(check, node, tc.d, s, m, tc.first)
		if !errors.Is(err, tc.err) || (err == nil && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: %+v, %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
		if errors.Is(err, ErrUnreadWhereFound) && (!errors.Is(err, boom) || !strings.Contains(err.Error(), "as native nftables")) {
			t.Errorf("%s: %q does not say which kind's read failed, and why", tc.name, err)
		}
	}
	// A pod whose settings an earlier build wrote alike: its rules are
	// read once a kind.
	plain := decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}
	pm := decision.Rules(plain, s, true, false)
	reads := 0
	if _, err := ReadUnrecorded(func(Writer, iptables.Model) ([]string, error) { reads++; return []string{"missing"}, nil }, node, plain, s, pm, false); err != nil || reads != 2 {
		t.Errorf("settings an earlier build wrote alike: %d reads, %v; want 2", reads, err)
	}
}

// TestReadUnrecordedNativeWithoutIPv6: under ipv6_redirect: dual-stack-only
// a model without IPv6 sends the pod's IPv6 direct, which native tables'
// inet rules capture: they are not taken as the pod's. With IPv6 in the
// model, or under the default policy, they are.
func TestReadUnrecordedNativeWithoutIPv6(t *testing.T) {
	node := Writer{Backend: release.NFT, Guessed: true}
	d := decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}
	only := decision.DefaultNodeSettings()
	only.IPv6 = decision.IPv6DualStackOnly
	for _, tc := range []struct {
		name string
		s    decision.NodeSettings
		v6   bool
		held bool
	}{
		{"dual-stack-only, IPv4 model", only, false, false},
		{"dual-stack-only, dual-stack model", only, true, true},
		{"always, IPv4 model", decision.DefaultNodeSettings(), false, true},
	} {
		m := decision.Rules(d, tc.s, true, tc.v6)
		got, err := ReadUnrecorded(func(w Writer, _ iptables.Model) ([]string, error) {
			if w.Native {
				return nil, nil
			}
			return []string{"missing"}, nil
		}, node, d, tc.s, m, false)
		if err != nil || (got.Diffs == nil) != tc.held || (tc.held && !got.By.Native) {
			t.Errorf("%s: %+v, %v; want held by native tables %v", tc.name, got, err, tc.held)
		}
	}
}

// TestReadUnrecordedOtherFirst: read the other kind first, a sandbox it
// holds is not read with the node's writer; one it no longer holds is,
// and its differences stand.
func TestReadUnrecordedOtherFirst(t *testing.T) {
	node := Writer{Backend: release.NFT, Native: true}
	d := decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}
	s := decision.DefaultNodeSettings()
	m := decision.Rules(d, s, true, false)
	for _, otherHolds := range []bool{true, false} {
		var read []bool // Native of each read
		check := func(w Writer, _ iptables.Model) ([]string, error) {
			read = append(read, w.Native)
			if !w.Native && otherHolds {
				return nil, nil
			}
			return []string{"missing"}, nil
		}
		got, err := ReadUnrecorded(check, node, d, s, m, true)
		want, wantRead := Held{Model: m, By: node.OtherKind()}, []bool{false}
		if !otherHolds {
			want, wantRead = Held{Diffs: []string{"missing"}, Model: m, By: node}, []bool{false, true}
		}
		if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(read, wantRead) {
			t.Errorf("the other kind holding %v: %+v, %v, read native %v; want %+v, read native %v", otherHolds, got, err, read, want, wantRead)
		}
	}
}
