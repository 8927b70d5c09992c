package multinode

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/pkg/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// pluginToken is the token in node n's plugin kubeconfig.
func pluginToken(t *testing.T, n *cluster.Node) string {
	t.Helper()
	path := filepath.Join(n.IstioRunDir, install.KubeconfigName)
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token
		}
	}
	t.Fatalf("%s holds no token", path)
	return ""
}

// tokenStatus is what the API server answers the plugin's one request (a
// pod GET) with token: 401 once the token is revoked.
func tokenStatus(t *testing.T, token string) int {
	t.Helper()
	status, _, err := env.fleet.DoAs(t.Context(), token, http.MethodGet, "/api/v1/namespaces/default/pods/server", nil)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// TestNodeDeletedRevokesOnlyItsTokens: the plugin's tokens are bound to
// their node. One Node deleted (and its kubelet, restarted, registering it
// again under a new UID) revokes that node's tokens only: the other nodes'
// plugins keep reading pods. The node comes back Ready with its agent,
// meshed pods start on it again, and its agent, seeing the new UID, gives
// its plugin a token the API server accepts (before, the revoked one stayed
// until its renewal, for the day the agent is down).
func TestNodeDeletedRevokesOnlyItsTokens(t *testing.T) {
	serverAddr(t)
	before := requireAgentsReady(t, env.fleet.Nodes)
	victim := env.fleet.Nodes[1]
	tokens := map[string]string{}
	for _, n := range env.fleet.Nodes {
		tokens[n.Name] = pluginToken(t, n)
		if s := tokenStatus(t, tokens[n.Name]); s != http.StatusOK {
			t.Fatalf("node %s's plugin token before: %d", n.Name, s)
		}
	}
	if err := victim.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "delete", "node", victim.Name, "--wait=true")
	poll.Until(t, 30*time.Second, "node "+victim.Name+"'s plugin token refused", func() (bool, string) {
		s := tokenStatus(t, tokens[victim.Name])
		return s == http.StatusUnauthorized, fmt.Sprint(s)
	})
	for _, n := range env.fleet.Nodes {
		if n != victim {
			if s := tokenStatus(t, tokens[n.Name]); s != http.StatusOK {
				t.Errorf("node %s's plugin token after %s was deleted: %d, want 200", n.Name, victim.Name, s)
			}
		}
	}
	if err := victim.StartKubelet(t.Context()); err != nil {
		t.Fatal(err)
	}
	after := requireAgentsReady(t, env.fleet.Nodes)
	// Back within the pod garbage collector's 40 s, the agent's pod is
	// kept: its new token is then the running agent's doing, not a new
	// pod's first mint.
	t.Logf("the agent on %s: pod %s before, %s after", victim.Name, before[victim.Name].Metadata.UID, after[victim.Name].Metadata.UID)
	name := "after-reregister"
	startPod(t, victim, cluster.PodSpec{Namespace: "default", Name: name, Target: serverAddr(t), Sidecar: true, NodeName: victim.Name})
	if err := rulesMatchModel(t.Context(), victim, name); err != nil {
		t.Error(err)
	}
	poll.Until(t, 3*time.Minute, "a working plugin token on "+victim.Name+" again", func() (bool, string) {
		if _, err := os.Stat(filepath.Join(victim.IstioRunDir, install.KubeconfigName)); err != nil {
			return false, err.Error()
		}
		s := tokenStatus(t, pluginToken(t, victim))
		return s == http.StatusOK, fmt.Sprint(s)
	})
}
