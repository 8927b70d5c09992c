package integration

import (
	"net/netip"
	"strings"
	"testing"
)

const (
	serverPort = 8080
	appPort    = 9080
	proxyUID   = 1337
)

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// TestTrafficThroughTheProxy sends real connections through the rules the
// plugin programmed: a server pod and meshed or unmeshed pods on one bridge.
func TestTrafficThroughTheProxy(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			n := newNetwork(t)
			server := newSandbox(t, "team-b", "server")
			n.mustAdd(t, server, n.conflist(t, "1.0.0", nil))
			startIn(t, server.path(), 0, "server", "--port", "8080", "--name", "server")
			conf := istioConf(map[string]any{"iptables_backend": string(b)})

			// pod starts a pod with the given annotations (nil: unmeshed) and,
			// when meshed, its proxy.
			pod := func(t *testing.T, ann map[string]string, mesh bool) *sandbox {
				name := podName(t)
				a, ctrs := meshed(ann)
				if !mesh {
					a, ctrs = nil, ctrs[:1]
				}
				createPod(t, "team-a", name, a, ctrs, nil)
				s := newSandbox(t, "team-a", name)
				n.mustAdd(t, s, n.conflist(t, "1.0.0", conf))
				if mesh {
					startIn(t, s.path(), proxyUID, "proxy")
				}
				return s
			}
			expect := func(t *testing.T, got, want string) {
				t.Helper()
				if !strings.HasPrefix(got, want) {
					t.Errorf("got %q, want it to start with %q", got, want)
				}
			}

			t.Run("outbound reaches the proxy with the original destination", func(t *testing.T) {
				s := pod(t, nil, true)
				for _, dst := range []netip.Addr{server.v4, server.v6} {
					to := hostPort(dst, serverPort)
					expect(t, connect(t, s.path(), 0, to), "proxy listener=outbound orig="+to+" ")
				}
			})
			t.Run("inbound lands on 15006 with the pod's port", func(t *testing.T) {
				s := pod(t, nil, true)
				for _, dst := range []netip.Addr{s.v4, s.v6} {
					to := hostPort(dst, appPort)
					expect(t, connect(t, server.path(), 0, to), "proxy listener=inbound orig="+to+" ")
				}
			})
			t.Run("the proxy's own traffic goes direct", func(t *testing.T) {
				s := pod(t, nil, true)
				expect(t, connect(t, s.path(), proxyUID, hostPort(server.v4, serverPort)), "server name=server ")
			})
			t.Run("excluded port goes direct", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeOutboundPorts": "8080"}, true)
				expect(t, connect(t, s.path(), 0, hostPort(server.v4, serverPort)), "server name=server ")
				expect(t, connect(t, s.path(), 0, hostPort(server.v6, serverPort)), "server name=server ")
			})
			t.Run("excluded CIDR goes direct", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeOutboundIPRanges": server.v4.String() + "/32," + server.v6.String() + "/128"}, true)
				expect(t, connect(t, s.path(), 0, hostPort(server.v4, serverPort)), "server name=server ")
				expect(t, connect(t, s.path(), 0, hostPort(server.v6, serverPort)), "server name=server ")
			})
			t.Run("excluded inbound port is not captured", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeInboundPorts": "8080"}, true)
				startIn(t, s.path(), 0, "server", "--port", "8080", "--name", "app")
				expect(t, connect(t, server.path(), 0, hostPort(s.v4, serverPort)), "server name=app ")
			})
			t.Run("unmeshed pod goes direct", func(t *testing.T) {
				s := pod(t, nil, false)
				expect(t, connect(t, s.path(), 0, hostPort(server.v4, serverPort)), "server name=server ")
			})
		})
	}
}
