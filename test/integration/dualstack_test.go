package integration

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/podsim"
)

// where says where a connection from the app landed: the proxy, the
// server directly, or refused.
func where(t *testing.T, netns string, uid int, addr string) string {
	t.Helper()
	line, err := podsim.Connect(netns, uid, testproxy(), addr)
	switch {
	case err != nil && strings.Contains(err.Error(), "connection refused"):
		return "refused"
	case err != nil:
		t.Fatal(err)
	case strings.HasPrefix(line, "proxy listener=outbound "):
		return "proxy"
	case strings.HasPrefix(line, "server name=server "):
		return "direct"
	}
	return "unexpected: " + line
}

// TestDualStackChoice: a dual-stack pod (the bridge gives it an IPv4 and an
// IPv6 address) whose app (uid 1000) connects to a server listening on
// both families. With a proxy that listens on IPv4 only (Envoy without
// ISTIO_DUAL_STACK), ipv6_redirect decides: always captures IPv6 too, so
// those connections are refused rather than leave the mesh;
// dual-stack-only leaves them direct, as upstream's plugin does. With
// ISTIO_DUAL_STACK=true and a dual-stack proxy both families go through
// it, whatever the setting.
func TestDualStackChoice(t *testing.T) {
	n := newNetwork(t)
	server := newSandbox(t, "team-b", "server")
	mustAdd(t, n, server, conflist(t, n, "1.0.0", nil))
	startIn(t, server.Path(), 0, "server", "--port", "8080", "--name", "server")
	var table []string
	for _, tc := range []struct {
		policy         string
		dualStack      bool
		wantV4, wantV6 string
	}{
		{"always", false, "proxy", "refused"},
		{"dual-stack-only", false, "proxy", "direct"},
		{"always", true, "proxy", "proxy"},
		{"dual-stack-only", true, "proxy", "proxy"},
	} {
		name := fmt.Sprintf("%s, ISTIO_DUAL_STACK=%v", tc.policy, tc.dualStack)
		t.Run(name, func(t *testing.T) {
			pod := podName(t)
			ann, ctrs := meshed(nil)
			proxyArgs := []string{"proxy", "--ipv4-only"}
			if tc.dualStack {
				ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_DUAL_STACK", "value": "true"}}
				proxyArgs = []string{"proxy"}
			}
			createPod(t, "team-a", pod, ann, ctrs, nil)
			s := newSandbox(t, "team-a", pod)
			mustAdd(t, n, s, conflist(t, n, "1.0.0", istioConf(map[string]any{"ipv6_redirect": tc.policy})))
			if !s.V6.IsValid() {
				t.Fatal("the pod has no IPv6 address")
			}
			startIn(t, s.Path(), proxyUID, proxyArgs...)
			v4 := where(t, s.Path(), 1000, hostPort(server.V4, serverPort))
			v6 := where(t, s.Path(), 1000, hostPort(server.V6, serverPort))
			table = append(table, fmt.Sprintf("| %s | %v | %s | %s |", tc.policy, tc.dualStack, v4, v6))
			if v4 != tc.wantV4 || v6 != tc.wantV6 {
				t.Errorf("IPv4 %s, IPv6 %s; want %s, %s", v4, v6, tc.wantV4, tc.wantV6)
			}
		})
	}
	t.Logf("where the app's connections land:\n| ipv6_redirect | ISTIO_DUAL_STACK | to %s | to %s |\n|---|---|---|---|\n%s",
		netip.AddrPortFrom(server.V4, serverPort), netip.AddrPortFrom(server.V6, serverPort), strings.Join(table, "\n"))
}
