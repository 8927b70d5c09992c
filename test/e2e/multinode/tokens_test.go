package multinode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
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

// tokenNode is the node a token's claims bind it to (read, not verified).
func tokenNode(t *testing.T, token string) (name, uid string) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the plugin's token is not a JWT (%d parts)", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		K8s struct {
			Node struct{ Name, UID string }
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.K8s.Node.Name, claims.K8s.Node.UID
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
	// Not the server's node (the last): on Flannel its pods lose their
	// network until RejoinFlannel, and the server lives for the run.
	victim := env.fleet.Nodes[len(env.fleet.Nodes)-2]
	tokens := map[string]string{}
	for _, n := range env.fleet.Nodes {
		tokens[n.Name] = pluginToken(t, n)
		if s := tokenStatus(t, tokens[n.Name]); s != http.StatusOK {
			t.Fatalf("node %s's plugin token before: %d", n.Name, s)
		}
	}
	_, oldUID := tokenNode(t, tokens[victim.Name])
	if err := victim.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		// A failure before the restart: the node back for the tests after.
		if !restarted {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := victim.StartKubelet(ctx); err != nil {
				t.Errorf("starting %s's kubelet again: %v", victim.Name, err)
			}
		}
	})
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
	restarted = true
	after := requireAgentsReady(t, env.fleet.Nodes)
	// Back within the pod garbage collector's 40 s, the agent's pod is
	// kept: its new token is then the running agent's doing (its check
	// of the node's UID), not a new pod's first mint. No pod starts on
	// the node before: a refused lookup would mint too.
	if b, a := before[victim.Name].Metadata.UID, after[victim.Name].Metadata.UID; a != b {
		t.Fatalf("the agent's pod on %s was replaced (%s, then %s): its new token proves nothing of the running agent", victim.Name, b, a)
	}
	poll.Until(t, 3*time.Minute, "a working plugin token on "+victim.Name+" again", func() (bool, string) {
		s := tokenStatus(t, pluginToken(t, victim))
		return s == http.StatusOK, fmt.Sprint(s)
	})
	if _, uid := tokenNode(t, pluginToken(t, victim)); uid == "" || uid == oldUID {
		t.Errorf("node %s's new token is bound to uid %q, the old node's was %q", victim.Name, uid, oldUID)
	}
	if env.fleet.Primary == cluster.PrimaryFlannel {
		// A new Node, a new pod range: Flannel must be told, as its
		// operator would (RejoinFlannel), or the node's pods are cut off.
		if err := env.fleet.RejoinFlannel(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
	}
	name := "after-reregister"
	startPod(t, victim, cluster.PodSpec{Namespace: "default", Name: name, Target: serverAddr(t), Sidecar: true, NodeName: victim.Name})
	if err := rulesMatchModel(t.Context(), victim, name); err != nil {
		t.Error(err)
	}
	// The node is on the network again for the tests after: a plain pod
	// there reaches the server on another node.
	plain := startPod(t, victim, cluster.PodSpec{Namespace: "default", Name: "after-reregister-plain", Target: serverAddr(t), NodeName: victim.Name})
	poll.Until(t, 30*time.Second, "a plain pod on "+victim.Name+" reaching the server", func() (bool, string) {
		log := victim.ContainerLog(plain, "app")
		return strings.Contains(log, "server name=server"), log
	})
}
