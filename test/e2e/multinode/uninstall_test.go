package multinode

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// TestUninstallWithOneNodeDown: istio-cni is deleted (`kubectl delete -k`)
// while one node's agent is not running (its kubelet stopped, the agent's
// container ended). Every other node cleans itself; the down node keeps
// its files, and once its kubelet is back, the documented cleanup Job
// (deployments/optional/uninstall-node-job.yaml, its node named) removes
// them. Plain pods start on every node. Last: it leaves istio-cni
// uninstalled.
func TestUninstallWithOneNodeDown(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	down := env.fleet.Nodes[len(env.fleet.Nodes)-1]
	up := env.fleet.Nodes[:len(env.fleet.Nodes)-1]
	if err := down.StopKubelet(); err != nil {
		t.Fatal(err)
	}
	if n, err := down.StopContainers(t.Context(), "istio-cni", "install-cni"); err != nil || n != 1 {
		t.Fatalf("stopping the agent on %s: %d containers, %v", down.Name, n, err)
	}
	// kubectl istio-cni check names the node whose agent is stopped (its
	// pod still reads Ready: no kubelet reports otherwise; the agent
	// cannot be asked).
	requireCheck(t, 3, "node "+down.Name+":\n", "wrong: ")
	// --wait=false: the down node's pod cannot finish terminating.
	kubectl(t, "delete", "-k", filepath.Join(env.dir, "overlay"), "--wait=false")
	for _, n := range up {
		poll.Until(t, 2*time.Minute, "node "+n.Name+" uninstalled", func() (bool, string) {
			left := leftOn(n)
			return len(left) == 0, fmt.Sprint("left: ", left)
		})
	}
	for _, p := range []string{filepath.Join(down.CNIBinDir, install.PluginBinary), ownedPath(down)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("node %s, down at the uninstall: %v", down.Name, err)
		}
	}
	if err := down.StartKubelet(t.Context()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 3*time.Minute, "the istio-cni namespace gone", func() (bool, string) {
		out, err := env.fleet.Kubectl(t.Context(), "get", "namespace", "istio-cni", "--ignore-not-found", "-o", "name")
		return err == nil && out == "", out
	})
	if left := leftOn(down); len(left) == 0 {
		t.Errorf("node %s cleaned itself with no agent running", down.Name)
	}
	job, err := down.UninstallJob(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", job)
	name := "job/istio-cni-uninstall-" + down.Name
	if out, err := env.fleet.Kubectl(t.Context(), "-n", "kube-system", "wait", "--for=condition=complete", name, "--timeout=3m"); err != nil {
		desc, _ := env.fleet.Kubectl(t.Context(), "-n", "kube-system", "describe", name)
		t.Fatalf("the uninstall Job: %v\n%s\n%s", err, out, desc)
	}
	poll.Until(t, time.Minute, "node "+down.Name+" uninstalled by the Job", func() (bool, string) {
		left := leftOn(down)
		return len(left) == 0, fmt.Sprint("left: ", left)
	})
	target := serverAddr(t)
	for i, n := range env.fleet.Nodes {
		startPod(t, n, cluster.PodSpec{Namespace: "default", Name: fmt.Sprintf("plain-uninstalled-%d", i), Target: target, NodeName: n.Name})
	}
}
