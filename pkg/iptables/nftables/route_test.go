package nftables_test

import (
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// TestRouteOnlyWhenTProxyCaptures: TPROXY's policy route is there when
// inbound ports are captured, as upstream's configureTProxyRoutes and the
// iptables model have it, and not with no inbound ports.
func TestRouteOnlyWhenTProxyCaptures(t *testing.T) {
	spec := iptables.DefaultSpec()
	spec.TProxy = true
	if rs := nftables.Build(spec, false); rs.Route == nil || rs.Route.Mark != 1337 || rs.Route.Table != 133 {
		t.Errorf("TPROXY capturing every port: route %+v, want mark 1337 table 133", rs.Route)
	}
	spec.InboundPorts = iptables.Ports{}
	if rs := nftables.Build(spec, true); rs.Route != nil {
		t.Errorf("TPROXY capturing no port: route %+v, want none", rs.Route)
	}
	if rs := nftables.Build(iptables.DefaultSpec(), true); rs.Route != nil {
		t.Errorf("REDIRECT: route %+v, want none", rs.Route)
	}
}

// TestOfAModel: a model's native ruleset is its spec's, with IPv6 rules
// when it has IPv6; one with no family holds no table.
func TestOfAModel(t *testing.T) {
	if rs := nftables.Of(iptables.Model{}); len(rs.Tables) != 0 {
		t.Errorf("a sandbox passed through: %d tables, want none", len(rs.Tables))
	}
	spec := iptables.DefaultSpec()
	for _, v6 := range []bool{false, true} {
		got, want := nftables.Of(iptables.Build(spec, true, v6)), nftables.Build(spec, v6)
		if got.Commands() != want.Commands() {
			t.Errorf("v6=%v: Of differs from Build", v6)
		}
	}
}
