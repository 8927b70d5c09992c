package multinode

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// startPod creates the pod on node n, deletes it when the test ends, and
// waits for it to run.
func startPod(t *testing.T, n *cluster.Node, s cluster.PodSpec) cluster.Pod {
	t.Helper()
	if err := n.CreatePod(t.Context(), s.JSON()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _, _ = n.Do(context.Background(), http.MethodDelete, "/api/v1/namespaces/"+s.Namespace+"/pods/"+s.Name, nil)
	})
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	p, err := n.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pluginLog is the plugin's log file on node n, as this machine reads it.
func pluginLog(n *cluster.Node) string {
	return filepath.Join(n.IstioRunDir, install.LogDirName, install.PluginLogName)
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var (
	serverOnce sync.Once
	serverNode *cluster.Node
)

// serverAddr is the address of a plain server pod on the last node (at
// its first call: a node joined later is not it), which every app dials;
// it lives for the whole run.
func serverAddr(t *testing.T) string {
	t.Helper()
	var err error
	serverOnce.Do(func() {
		serverNode = env.fleet.Nodes[len(env.fleet.Nodes)-1]
		s := cluster.PodSpec{Namespace: "default", Name: "server", Server: true, NodeName: serverNode.Name}
		err = serverNode.CreatePod(context.Background(), s.JSON())
	})
	to := serverNode
	s := cluster.PodSpec{Namespace: "default", Name: "server"}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), podTimeout)
	defer cancel()
	p, err := to.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !to.Subnet.Contains(mustAddr(t, p.Status.PodIP)) {
		t.Fatalf("server pod %s is not in node %s's range %s", p.Status.PodIP, to.Name, to.Subnet)
	}
	return fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)
}

// kubectl runs kubectl against the fleet, failing the test on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := env.fleet.Kubectl(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requireAgentsReady waits for the DaemonSet's agent to be Ready on every
// node in nodes, and for no agent pod on any other node.
func requireAgentsReady(t *testing.T, nodes []*cluster.Node) map[string]cluster.Pod {
	t.Helper()
	var pods map[string]cluster.Pod
	poll.Until(t, podTimeout, "an agent Ready on each node that should run one", func() (bool, string) {
		var err error
		if pods, err = agentPods(t.Context()); err != nil {
			return false, err.Error()
		}
		var missing []string
		for _, n := range nodes {
			if p, ok := pods[n.Name]; !ok || !allReady(p) {
				missing = append(missing, n.Name)
			}
		}
		return len(missing) == 0 && len(pods) == len(nodes), fmt.Sprintf("no Ready agent on %v; agents on %d nodes", missing, len(pods))
	})
	return pods
}
