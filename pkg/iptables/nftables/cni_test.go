package nftables_test

import (
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// TestCNIGoldens holds the ruleset of the specs the plugin builds for
// pods to testdata/cni-*.golden, which test/upstream's TestCNIGoldens
// holds to what upstream's istio-nftables writes for the config
// upstream's istio-cni gives it: upstream's own goldens cover none of
// these (its test config captures nothing by default, and DNS only
// with named servers).
func TestCNIGoldens(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		set  func(*iptables.Spec)
	}{
		{"cni-default", false, func(*iptables.Spec) {}},
		{"cni-default-ipv6", true, func(*iptables.Spec) {}},
		{"cni-dns", false, func(s *iptables.Spec) { s.DNSCapture = true }},
		{"cni-dns-ipv6", true, func(s *iptables.Spec) { s.DNSCapture = true }},
		{"cni-tproxy", false, func(s *iptables.Spec) { s.TProxy = true }},
		{"cni-tproxy-ipv6", true, func(s *iptables.Spec) { s.TProxy = true }},
		{"cni-invalid-drop", false, func(s *iptables.Spec) { s.InvalidDrop = true }},
		{"cni-tproxy-dns-invalid-drop", false, func(s *iptables.Spec) { s.TProxy, s.DNSCapture, s.InvalidDrop = true, true, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", tc.name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			spec := iptables.DefaultSpec()
			tc.set(&spec)
			rs := nftables.Build(spec, tc.v6)
			if got := rs.Commands(); got != string(want) {
				t.Errorf("differs from testdata/%s.golden (upstream's):\n%s", tc.name, lineDiff(string(want), got))
			}
		})
	}
}
