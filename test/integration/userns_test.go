package integration

import (
	"testing"

	"istio-cni.local/istio-cni/test/podsim"
)

// TestUserNamespacePod meshes a pod with hostUsers: false through the
// chain: its network namespace belongs to a user namespace mapping 0–65535
// to podsim.UserNSBase, so its proxy's 1337 is UserNSBase+1337 on the
// host. The kernel refuses owner matches written from outside that user
// namespace; the plugin writes them from inside, and they mean the proxy's
// uid as the pod sees it.
func TestUserNamespacePod(t *testing.T) {
	const mappedProxy = podsim.UserNSBase + proxyUID
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			n := newNetwork(t)
			server := serverPod(t, n)

			name := podName(t)
			a, ctrs := meshed(nil)
			createPod(t, "team-a", name, a, ctrs, nil)
			s, err := podsim.NewUserNSSandbox("team-a", name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			mustAdd(t, n, s, conflist(t, n, "1.0.0", istioConf(w.keys())))
			startIn(t, s.Path(), mappedProxy, "proxy")

			to := hostPort(server.V4, serverPort)
			expectPrefix(t, connect(t, s.Path(), 0, to), "proxy listener=outbound orig="+to+" ")
			expectPrefix(t, connect(t, s.Path(), mappedProxy, to), "server name=server ")
			// The host's 1337 is nobody in the pod: its traffic is the app's.
			expectPrefix(t, connect(t, s.Path(), proxyUID, to), "proxy listener=outbound orig="+to+" ")
			in := hostPort(s.V4, appPort)
			expectPrefix(t, connect(t, server.Path(), 0, in), "proxy listener=inbound orig="+in+" ")
		})
	}
}
