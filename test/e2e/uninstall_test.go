package e2e

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// 12, last because it uninstalls. The installer pod is deleted (a restart):
// the files stay and pods keep starting, also while no agent runs at all. The DaemonSet is deleted
// (uninstall): the owned conflist, kubeconfig and binary go, and the
// primary config is untouched.
func TestRestartThenUninstall(t *testing.T) {
	requireInstalled(t)
	old := installerPod(t)
	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "delete", "pod", old, "--wait=true"); err != nil {
		t.Fatal(err)
	}
	assertFilesStay(t, "a restart")
	poll.Until(t, 2*time.Minute, "a new installer pod", func() (bool, string) {
		p, ok := installerPodOrEmpty(t)
		return ok && p.Metadata.Name != old, p.Metadata.Name
	})
	requireInstalled(t)

	// The agent away for longer (the DaemonSet stays, so its pod stopping
	// is no uninstall): a meshed pod starting meanwhile is redirected.
	away := `{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/os":"linux","e2e.istio-cni/away":"yes"}}}}}`
	back := `{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/os":"linux","e2e.istio-cni/away":null}}}}}`
	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", away); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "no installer pod, not even a terminating one", func() (bool, string) {
		pods := installerPods(t)
		return len(pods) == 0, fmt.Sprint(len(pods), " pods")
	})
	assertFilesStay(t, "the agent's absence")
	assertRedirected(t, startPod(t, meshedPod(t, "agent-away")))
	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", back); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)

	if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "delete", "daemonset", "istio-cni-node", "--wait=true"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "uninstalled", func() (bool, string) {
		var left []string
		for _, p := range []string{pluginPath(), kubeconfigPath(), ownedPath()} {
			if exists(p) {
				left = append(left, p)
			}
		}
		return len(left) == 0 && len(installerPods(t)) == 0, fmt.Sprint("left: ", left)
	})
	if b, _ := os.ReadFile(env.node.PrimaryConfig); !bytes.Equal(b, env.primary) {
		t.Errorf("primary conflist changed by the uninstall:\n%s\nwant:\n%s", b, env.primary)
	}
	// The node works without istio-cni: a plain pod starts on the primary.
	assertDirect(t, startPod(t, cluster.PodSpec{Namespace: "default", Name: "after-uninstall", Target: server(t)}))
}
