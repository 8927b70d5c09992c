package iptables

import "testing"

func TestParseIfName(t *testing.T) {
	for _, ok := range []string{"eth0", "net1", "a", "_x", "0", "abcdefghijklmno", "br-1.100", "enp0s31f6"} {
		if n, err := ParseIfName(ok); err != nil || string(n) != ok {
			t.Errorf("ParseIfName(%q) = %q, %v", ok, n, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".x", "-x", "abcdefghijklmnop", "eth0;ls", "net 1", "a/b", "a:b", "é", "*", "a\n"} {
		if n, err := ParseIfName(bad); err == nil {
			t.Errorf("ParseIfName(%q) = %q, want an error", bad, n)
		}
	}
}

// An interface name that bypassed ParseIfName is refused at render time.
func TestPlanRefusesUncheckedIfName(t *testing.T) {
	spec := DefaultSpec()
	spec.ExcludeInterfaces = []IfName{"-j"}
	rs := BuildFamily(spec, IPv4)
	if out, err := Plan(&rs, nil); err == nil {
		t.Fatalf("rendered:\n%s", out)
	}
}
