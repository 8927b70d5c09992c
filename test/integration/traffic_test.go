package integration

import (
	"net/netip"
	"testing"

	"istio-cni.local/istio-cni/test/podsim"
)

const (
	serverPort = 8080
	appPort    = 9080
	proxyUID   = 1337
)

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// serverPod starts an unmeshed pod on n serving on serverPort, its name
// "server".
func serverPod(t *testing.T, n *podsim.Network) *podsim.Sandbox {
	t.Helper()
	server := newSandbox(t, "team-b", "server")
	mustAdd(t, n, server, conflist(t, n, "1.0.0", nil))
	startIn(t, server.Path(), 0, "server", "--port", "8080", "--name", "server")
	return server
}

// TestTrafficThroughTheProxy sends real connections through the rules the
// plugin programmed: a server pod and meshed or unmeshed pods on one bridge.
func TestTrafficThroughTheProxy(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			n := newNetwork(t)
			server := serverPod(t, n)
			conf := istioConf(w.keys())

			// pod starts a pod with the given annotations (nil: unmeshed) and,
			// when meshed, its proxy.
			pod := func(t *testing.T, ann map[string]string, mesh bool) *podsim.Sandbox {
				name := podName(t)
				a, ctrs := meshed(ann)
				if !mesh {
					a, ctrs = nil, ctrs[:1]
				}
				createPod(t, "team-a", name, a, ctrs, nil)
				s := newSandbox(t, "team-a", name)
				mustAdd(t, n, s, conflist(t, n, "1.0.0", conf))
				if mesh {
					startIn(t, s.Path(), proxyUID, "proxy")
				}
				return s
			}

			t.Run("outbound reaches the proxy with the original destination", func(t *testing.T) {
				s := pod(t, nil, true)
				for _, dst := range []netip.Addr{server.V4, server.V6} {
					to := hostPort(dst, serverPort)
					expectPrefix(t, connect(t, s.Path(), 0, to), "proxy listener=outbound orig="+to+" ")
				}
			})
			t.Run("inbound lands on 15006 with the pod's port", func(t *testing.T) {
				s := pod(t, nil, true)
				for _, dst := range []netip.Addr{s.V4, s.V6} {
					to := hostPort(dst, appPort)
					expectPrefix(t, connect(t, server.Path(), 0, to), "proxy listener=inbound orig="+to+" ")
				}
			})
			t.Run("the proxy's own traffic goes direct", func(t *testing.T) {
				s := pod(t, nil, true)
				expectPrefix(t, connect(t, s.Path(), proxyUID, hostPort(server.V4, serverPort)), "server name=server ")
			})
			t.Run("excluded port goes direct", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeOutboundPorts": "8080"}, true)
				expectPrefix(t, connect(t, s.Path(), 0, hostPort(server.V4, serverPort)), "server name=server ")
				expectPrefix(t, connect(t, s.Path(), 0, hostPort(server.V6, serverPort)), "server name=server ")
			})
			t.Run("excluded CIDR goes direct", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeOutboundIPRanges": server.V4.String() + "/32," + server.V6.String() + "/128"}, true)
				expectPrefix(t, connect(t, s.Path(), 0, hostPort(server.V4, serverPort)), "server name=server ")
				expectPrefix(t, connect(t, s.Path(), 0, hostPort(server.V6, serverPort)), "server name=server ")
			})
			t.Run("excluded inbound port is not captured", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeInboundPorts": "8080"}, true)
				startIn(t, s.Path(), 0, "server", "--port", "8080", "--name", "app")
				expectPrefix(t, connect(t, server.Path(), 0, hostPort(s.V4, serverPort)), "server name=app ")
			})
			t.Run("unmeshed pod goes direct", func(t *testing.T) {
				s := pod(t, nil, false)
				expectPrefix(t, connect(t, s.Path(), 0, hostPort(server.V4, serverPort)), "server name=server ")
			})
		})
	}
}
