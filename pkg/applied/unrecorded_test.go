package applied

import (
	"errors"
	"reflect"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// TestReadUnrecorded: a sandbox no record names a writer for holds the
// model or an earlier build's rules, as the node's writer or the other
// kind writes them; the node's differences stand when neither does, and
// only a read with the node's writer can fail the reading.
func TestReadUnrecorded(t *testing.T) {
	node := Writer{Backend: release.NFT, Guessed: true}
	other := node.OtherKind()
	m := iptables.Build(iptables.DefaultSpec(), true, false)
	spec := iptables.DefaultSpec()
	spec.OutboundExclude = append(spec.OutboundExclude, 5432) // another spec stands for an earlier build's
	earlier := iptables.Build(spec, true, false)
	boom := errors.New("iptables-save: exit status 1")
	for _, tc := range []struct {
		name    string
		holds   map[bool]*iptables.Model // by Native; nil: nothing of ours
		fails   map[bool]bool            // the read with that kind fails
		earlier bool                     // an earlier build's rules differ
		want    Held
		err     bool
	}{
		{"the node's", map[bool]*iptables.Model{false: &m}, nil, true, Held{Model: m, By: node}, false},
		{"the node's, an earlier build's", map[bool]*iptables.Model{false: &earlier}, nil, true, Held{Model: earlier, Earlier: true, By: node}, false},
		{"the other kind's", map[bool]*iptables.Model{true: &m}, nil, true, Held{Model: m, By: other}, false},
		{"the other kind's, an earlier build's", map[bool]*iptables.Model{true: &earlier}, nil, true, Held{Model: earlier, Earlier: true, By: other}, false},
		{"an earlier build's, none differ", map[bool]*iptables.Model{true: &earlier}, nil, false, Held{Diffs: []string{"missing"}, Model: m, By: node}, false},
		{"neither", nil, nil, true, Held{Diffs: []string{"missing"}, Model: m, By: node}, false},
		{"the node's read fails", map[bool]*iptables.Model{true: &m}, map[bool]bool{false: true}, true, Held{Model: m, By: node}, true},
		{"the other kind's read fails", nil, map[bool]bool{true: true}, true, Held{Diffs: []string{"missing"}, Model: m, By: node}, false},
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
		var e *iptables.Model
		if tc.earlier {
			e = &earlier
		}
		got, err := ReadUnrecorded(check, node, m, e, false)
		if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("%s: %+v, %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// TestReadUnrecordedOtherFirst: read the other kind first, a sandbox it
// holds is not read with the node's writer; one it no longer holds is,
// and its differences stand.
func TestReadUnrecordedOtherFirst(t *testing.T) {
	node := Writer{Backend: release.NFT, Native: true}
	m := iptables.Build(iptables.DefaultSpec(), true, false)
	for _, otherHolds := range []bool{true, false} {
		var read []bool // Native of each read
		check := func(w Writer, _ iptables.Model) ([]string, error) {
			read = append(read, w.Native)
			if !w.Native && otherHolds {
				return nil, nil
			}
			return []string{"missing"}, nil
		}
		got, err := ReadUnrecorded(check, node, m, nil, true)
		want, wantRead := Held{Model: m, By: node.OtherKind()}, []bool{false}
		if !otherHolds {
			want, wantRead = Held{Diffs: []string{"missing"}, Model: m, By: node}, []bool{false, true}
		}
		if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(read, wantRead) {
			t.Errorf("the other kind holding %v: %+v, %v, read native %v; want %+v, read native %v", otherHolds, got, err, read, want, wantRead)
		}
	}
}
