package multinode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

const podTimeout = 3 * time.Minute

// agentPods returns the DaemonSet's pods by the node they run on.
func agentPods(ctx context.Context) (map[string]cluster.Pod, error) {
	return podsByNode(ctx, "istio-cni", "app.kubernetes.io/component=node-agent")
}

func allReady(p cluster.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// TestDaemonSetOnEveryNode: the DaemonSet is Ready on every node, and on
// each one it installed into that node's own directories, reached through
// the standard host paths (no hostPath was changed).
func TestDaemonSetOnEveryNode(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	for _, n := range env.fleet.Nodes {
		for _, f := range []string{
			filepath.Join(n.CNIBinDir, install.PluginBinary),
			filepath.Join(n.CNIBinDir, install.FullBinary),
			filepath.Join(n.CNIBinDir, install.LookupBinary),
			filepath.Join(n.IstioRunDir, install.KubeconfigName),
			filepath.Join(n.CNINetDir, "02-istio-cni.conflist"),
		} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("node %s: %v", n.Name, err)
			}
		}
		// Each node's plugin token is bound to that node: its claims
		// name it, and no other.
		if name, uid := tokenNode(t, pluginToken(t, n)); name != n.Name || uid == "" {
			t.Errorf("node %s's plugin token is bound to node %q (uid %q)", n.Name, name, uid)
		}
	}
}

// TestCrossNodeTraffic: a meshed pod on the first node calling a server on
// the last goes through its proxy with the server's address as the
// original destination; a plain pod beside it reaches the server directly.
func TestCrossNodeTraffic(t *testing.T) {
	from := env.fleet.Nodes[0]
	target := serverAddr(t)
	meshed := startPod(t, from, cluster.PodSpec{Namespace: "default", Name: "meshed", Target: target, Sidecar: true, NodeName: from.Name})
	plain := startPod(t, from, cluster.PodSpec{Namespace: "default", Name: "plain", Target: target, NodeName: from.Name})

	rules, err := from.IptablesSave(t.Context(), "default", "meshed")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rules, ":ISTIO_OUTPUT ") {
		t.Errorf("meshed pod on %s has no ISTIO_OUTPUT chain:\n%s", from.Name, rules)
	}
	want := "proxy listener=outbound orig=" + target
	poll.Until(t, 30*time.Second, "the meshed app's request through its proxy", func() (bool, string) {
		log := from.ContainerLog(meshed, "app")
		return strings.Contains(log, want), log
	})
	if log := from.ContainerLog(meshed, "app"); strings.Contains(log, "server name=server") {
		t.Errorf("a meshed request bypassed the proxy:\n%s", log)
	}
	poll.Until(t, 30*time.Second, "the plain app's request straight to the server on another node", func() (bool, string) {
		log := from.ContainerLog(plain, "app")
		return strings.Contains(log, "server name=server"), log
	})
	if log := from.ContainerLog(plain, "app"); strings.Contains(log, "proxy listener") {
		t.Errorf("a plain pod's request went to a proxy:\n%s", log)
	}
}
