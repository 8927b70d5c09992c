package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/plugin"
)

// TestMeshedPodLifecycle runs ADD, CHECK and DEL for a meshed pod for every
// CNI version and every writer: both iptables backends, native nftables.
func TestMeshedPodLifecycle(t *testing.T) {
	for _, v := range version.All.SupportedVersions() {
		if v == "0.1.0" || v == "0.2.0" {
			continue // no chaining before 0.3.0
		}
		for _, w := range writers {
			t.Run(v+"/"+w.name, func(t *testing.T) {
				ctx := context.Background()
				n, name := newNetwork(t), podName(t)
				ann, ctrs := meshed(nil)
				createPod(t, "team-a", name, ann, ctrs, nil)
				s := newSandbox(t, "team-a", name)
				list := conflist(t, n, v, istioConf(w.keys()))
				mustAdd(t, n, s, list)
				if !s.V4.IsValid() || !s.V6.IsValid() {
					t.Fatalf("the bridge gave %v %v, want an IPv4 and an IPv6 address", s.V4, s.V6)
				}
				assertRules(t, s.Path(), w, iptables.DefaultSpec(), true)
				if v != "0.3.0" && v != "0.3.1" {
					if err := n.Check(ctx, s); err != nil {
						t.Fatalf("CHECK with the rules in place: %v", err)
					}
					tamper(t, s.Path(), w)
					err := n.Check(ctx, s)
					chain := "ISTIO_OUTPUT"
					if w.native() {
						chain = "chain istio-output"
					}
					if cniCode(err) != plugin.ErrRulesMismatch || !strings.Contains(err.Error(), chain) {
						t.Fatalf("CHECK after tampering = %v, want code %d", err, plugin.ErrRulesMismatch)
					}
				}
				for i := 0; i < 2; i++ {
					if err := n.Del(ctx, s); err != nil {
						t.Fatalf("DEL #%d: %v", i+1, err)
					}
				}
				assertNoRules(t, s.Path(), w)
			})
		}
	}
}

// tamper deletes the outbound catch-all, as a stray iptables call would.
func tamper(t *testing.T, path string, w writer) {
	t.Helper()
	tamperWith(t, path, w, "*nat\n-D ISTIO_OUTPUT -j ISTIO_REDIRECT\nCOMMIT\n", "flush chain inet istio-proxy-nat istio-output\n")
}

// TestDecisionOnARealNode covers each outcome of the decision with the API's
// own pod objects.
func TestDecisionOnARealNode(t *testing.T) {
	always := "Always"
	for _, tc := range []struct {
		name     string
		ns       string
		ann      map[string]string
		ctrs     []string
		inits    []map[string]any
		create   bool
		redirect bool
	}{
		{name: "meshed", ns: "team-a", create: true, redirect: true},
		{name: "no sidecar", ns: "team-a", ctrs: []string{"app"}, create: true},
		{name: "excluded namespace, never read", ns: "kube-system", create: false},
		{name: "inject false", ns: "team-a", ann: map[string]string{"sidecar.istio.io/inject": "false"}, create: true},
		{name: "istio-init present", ns: "team-a", inits: []map[string]any{container("istio-init")}, create: true},
		{name: "native sidecar", ns: "team-a", ctrs: []string{"app"}, create: true, redirect: true,
			inits: []map[string]any{{"name": "istio-proxy", "image": "test/proxy:v1", "restartPolicy": always}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, name := newNetwork(t), podName(t)
			ann, ctrs := meshed(tc.ann)
			if tc.ctrs != nil {
				ctrs = nil
				for _, c := range tc.ctrs {
					ctrs = append(ctrs, container(c))
				}
			}
			if tc.create {
				createPod(t, tc.ns, name, ann, ctrs, tc.inits)
			}
			s := newSandbox(t, tc.ns, name)
			mustAdd(t, n, s, conflist(t, n, "1.0.0", istioConf(nil)))
			if tc.redirect {
				assertRules(t, s.Path(), autoWriter, iptables.DefaultSpec(), true)
			} else {
				assertNoRules(t, s.Path(), autoWriter)
			}
		})
	}
}

// TestBadSettingsProgramNothing: a meshed pod whose settings are invalid
// fails ADD and its namespace holds nothing of ours.
func TestBadSettingsProgramNothing(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		code uint
	}{
		{map[string]string{"traffic.sidecar.istio.io/excludeOutboundPorts": "80 -j ACCEPT"}, plugin.ErrPodSettings},
		{map[string]string{"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/33"}, plugin.ErrPodSettings},
		{map[string]string{"traffic.sidecar.istio.io/includeInboundPorts": "70000"}, plugin.ErrPodSettings},
		{map[string]string{"traffic.sidecar.istio.io/excludeInterfaces": "eth0,-j"}, plugin.ErrPodSettings},
		{map[string]string{"sidecar.istio.io/interceptionMode": "tproxy"}, plugin.ErrPodSettings},
	} {
		t.Run(fmt.Sprint(tc.ann), func(t *testing.T) {
			n, name := newNetwork(t), podName(t)
			ann, ctrs := meshed(tc.ann)
			createPod(t, "team-a", name, ann, ctrs, nil)
			s := newSandbox(t, "team-a", name)
			err := add(t, n, s, conflist(t, n, "1.0.0", istioConf(nil)))
			if cniCode(err) != tc.code {
				t.Fatalf("ADD = %v, want code %d", err, tc.code)
			}
			for k, v := range tc.ann {
				if !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), v) {
					t.Errorf("error %q must name %s and %q", err, k, v)
				}
			}
			assertNoRules(t, s.Path(), autoWriter)
		})
	}
}
