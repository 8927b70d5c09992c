package integration

import (
	"context"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/plugin"
	"istio-cni.local/istio-cni/test/podsim"
)

// exchangeUDP sends one datagram from a namespace as uid (from srcPort,
// if given) and returns the reply line.
func exchangeUDP(t *testing.T, netns string, uid int, addr string, srcPort ...string) string {
	t.Helper()
	args := []string{"client", "--udp", "--addr", addr, "--timeout", "3s"}
	if len(srcPort) > 0 {
		args = append(args, "--src-port", srcPort[0])
	}
	out, err := podsim.Command(netns, uid, testproxy(), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("UDP to %s from %s as uid %d: %v\n%s", addr, netns, uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDNSCaptureTraffic: with ISTIO_META_DNS_CAPTURE=true the app's DNS, UDP
// and TCP, to any resolver address lands on the proxy's DNS listener
// (15053); the proxy's own queries reach the real resolver.
func TestDNSCaptureTraffic(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			n := newNetwork(t)
			resolver := newSandbox(t, "team-b", "resolver")
			mustAdd(t, n, resolver, conflist(t, n, "1.0.0", nil))
			startIn(t, resolver.Path(), 0, "udp", "--port", "53", "--name", "resolver")

			name := podName(t)
			ann, ctrs := meshed(nil)
			ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_META_DNS_CAPTURE", "value": "true"}}
			createPod(t, "team-a", name, ann, ctrs, nil)
			s := newSandbox(t, "team-a", name)
			list := conflist(t, n, "1.0.0", istioConf(w.keys()))
			mustAdd(t, n, s, list)
			spec := iptables.DefaultSpec()
			spec.DNSCapture = true
			assertRules(t, s.Path(), w, spec, true)
			// pilot-agent's DNS listener binds loopback.
			startIn(t, s.Path(), proxyUID, "udp", "--host", "127.0.0.1", "--port", "15053", "--name", "dns-proxy")
			startIn(t, s.Path(), proxyUID, "udp", "--host", "::1", "--port", "15053", "--name", "dns-proxy")
			startIn(t, s.Path(), proxyUID, "server", "--port", "15053", "--name", "dns-proxy-tcp")

			// A resolver that exists, and an address on the pod network
			// where nothing answers: the app's query never leaves the pod.
			for _, dst := range []string{hostPort(resolver.V4, 53), "198.51.100.253:53", hostPort(resolver.V6, 53)} {
				expectPrefix(t, exchangeUDP(t, s.Path(), 0, dst), "udp name=dns-proxy ")
				expectPrefix(t, connect(t, s.Path(), 0, dst), "server name=dns-proxy-tcp ")
			}
			// The proxy resolves upstream itself: not captured again.
			expectPrefix(t, exchangeUDP(t, s.Path(), proxyUID, hostPort(resolver.V4, 53)), "udp name=resolver ")
			expectPrefix(t, exchangeUDP(t, s.Path(), proxyUID, hostPort(resolver.V6, 53)), "udp name=resolver ")

			// The app and the proxy query the same resolver from the same
			// source port: one 5-tuple. Only the conntrack zones keep the
			// proxy's query from matching the app's redirected flow and
			// looping back to 15053.
			to := hostPort(resolver.V4, 53)
			expectPrefix(t, exchangeUDP(t, s.Path(), 0, to, "40053"), "udp name=dns-proxy ")
			expectPrefix(t, exchangeUDP(t, s.Path(), proxyUID, to, "40053"), "udp name=resolver ")

			// CHECK sees a conntrack-zone rule go missing from the raw
			// table; DEL removes the raw table's rules with the rest.
			ctx := context.Background()
			if err := n.Check(ctx, s); err != nil {
				t.Fatalf("CHECK with the rules in place: %v", err)
			}
			tamperWith(t, s.Path(), w, "*raw\n-D ISTIO_INBOUND -p udp -m udp --sport 53 -j CT --zone 1\nCOMMIT\n",
				"flush chain inet istio-proxy-raw istio-inbound\n")
			if err := n.Check(ctx, s); cniCode(err) != plugin.ErrRulesMismatch || !strings.Contains(err.Error(), "raw") {
				t.Fatalf("CHECK after tampering with the raw table = %v, want code %d naming it", err, plugin.ErrRulesMismatch)
			}
			if err := n.Del(ctx, s); err != nil {
				t.Fatal(err)
			}
			assertNoRules(t, s.Path(), w)
		})
	}
}

// TestProxyEnvNotABooleanStartsAsFalse: a proxy whose boolean settings are
// neither true nor false (yes, on) starts as the proxy and upstream read
// them, false: the real plugin writes the default rules, where it failed
// with code 102 before, and its log names the variables.
func TestProxyEnvNotABooleanStartsAsFalse(t *testing.T) {
	w := writer{"nft", release.NFT}
	name := podName(t)
	ann, ctrs := meshed(nil)
	ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_META_DNS_CAPTURE", "value": "yes"}, {"name": "INVALID_DROP", "value": "on"}}
	createPod(t, "team-a", name, ann, ctrs, nil)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name + ";K8S_POD_UID=" + podUID(t, "team-a", name)
	s := newSandbox(t, "team-a", name)
	r := execPlugin(t, "ADD", pluginStdin(t, "1.0.0", istioConf(w.keys()), prevV4), s.Path(), args)
	if r.code != 0 {
		t.Fatalf("ADD: %d %s", r.code, r.msg)
	}
	assertRules(t, s.Path(), w, iptables.DefaultSpec(), false)
	if !strings.Contains(string(r.stderr), "istio-proxy sets ISTIO_META_DNS_CAPTURE, INVALID_DROP to a value that is not true or false") {
		t.Errorf("the log does not name the variables:\n%s", r.stderr)
	}
}
