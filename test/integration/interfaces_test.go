package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/podsim"
)

// secondInterface gives a pod a second interface, net1 (192.0.2.1/30), to
// another namespace standing for a VM or a second network (192.0.2.2/30,
// TEST-NET-1).
func secondInterface(t *testing.T, pod *podsim.Sandbox) (peer *podsim.Sandbox) {
	t.Helper()
	peer = newSandbox(t, "team-b", podName(t)+"-vm")
	podNS, peerNS := filepath.Base(pod.Path()), filepath.Base(peer.Path())
	for _, args := range [][]string{
		{"link", "add", "net1", "netns", podNS, "type", "veth", "peer", "name", "vm0", "netns", peerNS},
		{"-n", podNS, "addr", "add", "192.0.2.1/30", "dev", "net1"},
		{"-n", podNS, "link", "set", "net1", "up"},
		{"-n", peerNS, "addr", "add", "192.0.2.2/30", "dev", "vm0"},
		{"-n", peerNS, "link", "set", "vm0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return peer
}

// TestInterfaceAnnotationsTraffic: an excluded interface's traffic goes
// direct both ways while eth0's is still captured; a rerouted (virtual
// machine's) interface's traffic to the pod lands on the proxy's outbound
// listener.
func TestInterfaceAnnotationsTraffic(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			n := newNetwork(t)
			server := newSandbox(t, "team-b", "server")
			mustAdd(t, n, server, conflist(t, n, "1.0.0", nil))
			conf := istioConf(w.keys())
			pod := func(t *testing.T, ann map[string]string) *podsim.Sandbox {
				name := podName(t)
				a, ctrs := meshed(ann)
				createPod(t, "team-a", name, a, ctrs, nil)
				s := newSandbox(t, "team-a", name)
				mustAdd(t, n, s, conflist(t, n, "1.0.0", conf))
				startIn(t, s.Path(), proxyUID, "proxy")
				startIn(t, s.Path(), 0, "server", "--port", "8080", "--name", "app")
				return s
			}

			t.Run("excluded interface goes direct", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/excludeInterfaces": "net1"})
				vm := secondInterface(t, s)
				startIn(t, vm.Path(), 0, "server", "--port", "8080", "--name", "vm")
				expectPrefix(t, connect(t, vm.Path(), 0, "192.0.2.1:8080"), "server name=app ")
				expectPrefix(t, connect(t, s.Path(), 0, "192.0.2.2:8080"), "server name=vm ")
				// eth0 is still captured, both ways.
				expectPrefix(t, connect(t, server.Path(), 0, hostPort(s.V4, serverPort)), "proxy listener=inbound ")
				to := hostPort(server.V4, serverPort)
				expectPrefix(t, connect(t, s.Path(), 0, to), "proxy listener=outbound orig="+to+" ")
			})
			t.Run("without the annotation net1 is captured", func(t *testing.T) {
				s := pod(t, nil)
				vm := secondInterface(t, s)
				expectPrefix(t, connect(t, vm.Path(), 0, "192.0.2.1:8080"), "proxy listener=inbound orig=192.0.2.1:8080 ")
				expectPrefix(t, connect(t, s.Path(), 0, "192.0.2.2:8080"), "proxy listener=outbound orig=192.0.2.2:8080 ")
			})
			t.Run("rerouted interface is captured as outbound", func(t *testing.T) {
				s := pod(t, map[string]string{"istio.io/reroute-virtual-interfaces": "net1"})
				vm := secondInterface(t, s)
				expectPrefix(t, connect(t, vm.Path(), 0, "192.0.2.1:8080"), "proxy listener=outbound orig=192.0.2.1:8080 ")
			})
			t.Run("kubevirtInterfaces, deprecated, still works", func(t *testing.T) {
				s := pod(t, map[string]string{"traffic.sidecar.istio.io/kubevirtInterfaces": "net1"})
				vm := secondInterface(t, s)
				expectPrefix(t, connect(t, vm.Path(), 0, "192.0.2.1:8080"), "proxy listener=outbound orig=192.0.2.1:8080 ")
			})
		})
	}
}
