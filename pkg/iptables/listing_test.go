package iptables

import (
	"slices"
	"strings"
	"testing"
)

// What inspect prints as wanted lines up with what it prints as observed,
// whatever order iptables-save declared the chains in, and only our rules
// are listed.
func TestListingMatchesObservedOrder(t *testing.T) {
	rs := BuildFamily(DefaultSpec(), IPv4)
	want := rs.Listing()
	// A save of the same rules, chains declared in another order, with a
	// foreign rule in OUTPUT.
	save := []string{"*nat", ":ISTIO_REDIRECT - [0:0]", ":OUTPUT ACCEPT [0:0]", ":ISTIO_OUTPUT - [0:0]",
		":PREROUTING ACCEPT [0:0]", ":ISTIO_IN_REDIRECT - [0:0]", ":ISTIO_INBOUND - [0:0]", "-A OUTPUT -d 10.0.0.0/8 -j RETURN"}
	for _, l := range slices.Backward(want) {
		save = append(save, strings.TrimPrefix(l, "nat "))
	}
	save = append(save, "COMMIT", "")
	obs, err := ParseSave([]byte(strings.Join(save, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	// The rules went in reversed: compare the chain order and the count.
	have := obs.OursListing()
	if len(have) != len(want) || slices.Contains(have, "nat -A OUTPUT -d 10.0.0.0/8 -j RETURN") {
		t.Fatalf("observed listing %q", have)
	}
	chainOf := func(l string) string { return strings.Fields(l)[2] }
	if !slices.EqualFunc(want, have, func(a, b string) bool { return chainOf(a) == chainOf(b) }) {
		t.Errorf("chains in different orders:\nwant %q\nhave %q", want, have)
	}
	if want[0] != "nat -A PREROUTING -p tcp -j ISTIO_INBOUND" || want[1] != "nat -A OUTPUT -j ISTIO_OUTPUT" {
		t.Errorf("built-in chains first: %q", want[:2])
	}
}
