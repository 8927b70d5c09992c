package integration

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/test/podsim"
)

// startTProxyProxy runs the test proxy as uid 1337 with NET_ADMIN (for
// IP_TRANSPARENT), as Istio runs Envoy in TPROXY mode.
func startTProxyProxy(t *testing.T, netns string) {
	t.Helper()
	p, err := podsim.Start(netns, 0, "setpriv", env.dir, "--reuid=1337", "--regid=1337", "--clear-groups",
		"--inh-caps=+net_admin", "--ambient-caps=+net_admin", testproxy(), "proxy", "--tproxy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
}

// TestTProxyTraffic: a TPROXY-mode pod's inbound connections reach the
// transparent proxy with the client's real source address and the original
// destination, in both families; outbound is still redirected; CHECK sees
// the policy routing go missing; DEL removes rules and routes.
func TestTProxyTraffic(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			ctx := context.Background()
			n := newNetwork(t)
			client := newSandbox(t, "team-b", "client")
			mustAdd(t, n, client, conflist(t, n, "1.0.0", nil))
			startIn(t, client.Path(), 0, "server", "--port", "8080", "--name", "server")

			name := podName(t)
			ann, ctrs := meshed(map[string]string{"sidecar.istio.io/interceptionMode": "TPROXY"})
			createPod(t, "team-a", name, ann, ctrs, nil)
			s := newSandbox(t, "team-a", name)
			mustAdd(t, n, s, conflist(t, n, "1.0.0", istioConf(w.keys())))
			spec := iptables.DefaultSpec()
			spec.TProxy = true
			assertRules(t, s.Path(), w, spec, true)
			startTProxyProxy(t, s.Path())

			for _, pair := range []struct{ from, to netip.Addr }{{client.V4, s.V4}, {client.V6, s.V6}} {
				to := hostPort(pair.to, appPort)
				got := connect(t, client.Path(), 0, to)
				// "peer=198.51.100.2:" or "peer=[2001:db8:100::2]:": any port.
				want := "proxy listener=inbound orig=" + to + " peer=" + strings.TrimSuffix(netip.AddrPortFrom(pair.from, 0).String(), "0")
				if !strings.HasPrefix(got, want) {
					t.Errorf("got %q, want it to start with %q (the client's own address)", got, want)
				}
			}
			to := hostPort(client.V4, serverPort)
			if got := connect(t, s.Path(), 0, to); !strings.HasPrefix(got, "proxy listener=outbound orig="+to+" ") {
				t.Errorf("outbound: got %q", got)
			}

			if err := n.Check(ctx, s); err != nil {
				t.Fatalf("CHECK with the rules in place: %v", err)
			}
			ns := filepath.Base(s.Path())
			if out, err := exec.Command("ip", "-n", ns, "-4", "rule", "del", "fwmark", "1337", "lookup", "133").CombinedOutput(); err != nil {
				t.Fatalf("ip rule del: %v\n%s", err, out)
			}
			if err := n.Check(ctx, s); err == nil || !strings.Contains(err.Error(), "fwmark") {
				t.Fatalf("CHECK without the ip rule = %v, want a mismatch naming it", err)
			}
			if err := n.Del(ctx, s); err != nil {
				t.Fatal(err)
			}
			assertNoRules(t, s.Path(), w)
			for _, fam := range []string{"-4", "-6"} {
				out, _ := exec.Command("ip", "-n", ns, fam, "route", "show", "table", "133").CombinedOutput()
				if strings.TrimSpace(string(out)) != "" {
					t.Errorf("ip %s route table 133 after DEL:\n%s", fam, out)
				}
				if out, _ := exec.Command("ip", "-n", ns, fam, "rule").CombinedOutput(); strings.Contains(string(out), "lookup 133") {
					t.Errorf("ip %s rule after DEL:\n%s", fam, out)
				}
			}
		})
	}
}
