package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A node never depends on a live agent to start pods. Each test here
// leaves istio-cni installed and ready.

// 12a. The agent crash-loops (a bad upgrade) and the plugin's token is
// refused (its ServiceAccount deleted and recreated, as a token outliving
// a day-long absence would be): a plain pod still starts, on the
// annotations the runtime passes, with no credential; a meshed pod fails
// closed at its sandbox, none of its containers running. Once the agent is
// back it mints a token, and kubelet's retry starts the meshed pod,
// redirected.
func TestNoAgentAndNoToken(t *testing.T) {
	requireInstalled(t)
	restore := agentCrashLooping(t)
	assertFilesStay(t, "an agent crash-looping")
	revokePluginToken(t)
	assertNodeStartsPlainPods(t, "plain-no-agent")
	meshed := meshedPod(t, "meshed-no-agent")
	createPod(t, meshed)
	assertFailsClosed(t, meshed)
	restore()
	requireInstalled(t)
	assertRunsRedirected(t, meshed)
}

// 12b. The DaemonSet's nodeSelector changed to exclude the node (a chart
// upgrade, a node relabelled): the controller deletes the agent for good,
// and its shutdown check sees it and uninstalls, so the node is not left
// with a config whose plugin's credentials nobody renews. Plain pods start;
// the agent comes back when the selector does.
func TestNodeSelectorMovesTheAgentOff(t *testing.T) {
	requireInstalled(t)
	agent, _ := installerPodOrEmpty(t)
	agentLog := followLog(agent)
	agentAway(t)
	waitUninstalled(t)
	if why := uninstallReason(agentLog()); !strings.Contains(why, "no longer runs on node "+env.node.Name) {
		t.Errorf("the agent's shutdown: %s", why)
	}
	assertNodeStartsPlainPods(t, "after-node-selector")
	agentBack(t)
	requireInstalled(t)
}

// awaySelector is the DaemonSet's patch that keeps it off the node (no
// node has the label); agentBack undoes it.
const awaySelector = `{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/os":"linux","e2e.istio-cni/away":"yes"}}}}}`

// agentAway keeps the agent off the node while its DaemonSet stays.
func agentAway(t *testing.T) {
	t.Helper()
	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", awaySelector); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "no installer pod, not even a terminating one", func() (bool, string) {
		pods := installerPods(t)
		return len(pods) == 0, fmt.Sprint(len(pods), " pods")
	})
}

func agentBack(t *testing.T) {
	t.Helper()
	back := `{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/os":"linux","e2e.istio-cni/away":null}}}}}`
	// Not t.Context(): a cleanup calls this too, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.node.Kubectl(ctx, "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", back); err != nil {
		t.Fatal(err)
	}
}

// agentCrashLooping rolls the DaemonSet to an agent that exits at once (a
// bad upgrade): the old agent stops as for any update, keeping the files,
// and from then on no agent runs on the node. The returned function rolls
// it back.
func agentCrashLooping(t *testing.T) func() {
	t.Helper()
	old := installerPod(t)
	patch := `[{"op":"add","path":"/spec/template/spec/containers/0/args","value":["--no-such-flag"]}]`
	if out, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "--type=json", "-p", patch); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	poll.Until(t, 2*time.Minute, "the new agent crash-looping", func() (bool, string) {
		for _, p := range installerPods(t) {
			if p.Metadata.Name == old {
				return false, "the old agent still there"
			}
			for _, c := range p.Status.ContainerStatuses {
				if _, waiting := c.State["waiting"]; waiting && c.RestartCount > 0 {
					return true, ""
				}
			}
		}
		return false, "not restarted yet"
	})
	return func() {
		restore := `[{"op":"remove","path":"/spec/template/spec/containers/0/args"}]`
		if out, err := env.node.Kubectl(context.Background(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "--type=json", "-p", restore); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// revokePluginToken deletes and recreates the plugin's ServiceAccount:
// every token minted for the old one is refused from then on.
func revokePluginToken(t *testing.T) {
	t.Helper()
	sa := kubectl(t, "-n", "istio-cni", "get", "serviceaccount", "istio-cni-plugin", "-o", "json")
	kubectl(t, "-n", "istio-cni", "delete", "serviceaccount", "istio-cni-plugin", "--wait=true")
	var obj map[string]any
	if err := json.Unmarshal([]byte(sa), &obj); err != nil {
		t.Fatal(err)
	}
	meta := obj["metadata"].(map[string]any)
	for _, k := range []string{"uid", "resourceVersion", "creationTimestamp"} {
		delete(meta, k)
	}
	data, _ := json.Marshal(obj)
	path := t.TempDir() + "/sa.json"
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "create", "-f", path)
	kc, err := clientcmd.LoadFromFile(kubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	token := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
	poll.Until(t, 30*time.Second, "the plugin's token refused", func() (bool, string) {
		status, _, err := env.node.DoAs(t.Context(), token, http.MethodGet, "/api/v1/namespaces/default/pods/none", nil)
		return err == nil && status == http.StatusUnauthorized, fmt.Sprint(status, err)
	})
}

// anyStarted: some container of the pod ran.
func anyStarted(p cluster.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if _, running := c.State["running"]; running {
			return true
		}
		if _, terminated := c.State["terminated"]; terminated {
			return true
		}
	}
	return false
}
