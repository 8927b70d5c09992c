package nfnl

import (
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
)

// The agent encodes a pod's rules while the pod waits for its ADD.
func BenchmarkEncode(b *testing.B) {
	layout, _ := LayoutOf("1.8.9")
	for _, name := range []string{"default", "tproxy"} {
		rs := iptables.BuildFamily(iptablestest.Specs()[name], iptables.IPv4)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := encode(&rs, layout); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
