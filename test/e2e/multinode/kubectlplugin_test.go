package multinode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// The kubectl plugin (cmd/kubectl-istio_cni) is proven where the fleet
// already is in the state it reads: no fleet operation of its own.
// TestNodeSelectorExcludesOneNode runs check while one node is excluded
// (it reads "excluded", exit 0), and why for a meshed pod on every node
// once the agent is back everywhere (each answered by that node's agent),
// then check again (exit 0); TestUninstallWithOneNodeDown runs check while
// one node's kubelet and agent are stopped (that node named, exit 3).

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// kubectlPlugin builds kubectl-istio_cni once into a directory of its own
// and returns that directory, to put on PATH before kubectl's.
func kubectlPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		pluginDir = filepath.Join(env.dir, "kubectl-plugins")
		root, err := filepath.Abs(filepath.Join("..", "..", ".."))
		if err != nil {
			pluginErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "kubectl-istio_cni"), "./cmd/kubectl-istio_cni")
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			pluginErr = fmt.Errorf("building kubectl-istio_cni: %w\n%s", err, out)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

// kubectlIstioCNI runs `kubectl istio-cni ARGS` as a user does: kubectl
// (the fleet's build) finds the plugin on PATH; the fleet's admin
// kubeconfig through $KUBECONFIG. It returns the output and exit status.
func kubectlIstioCNI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	dir := kubectlPlugin(t)
	kubectlBin, err := cluster.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"istio-cni"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.fleet.Kubeconfig,
		"PATH="+dir+string(os.PathListSeparator)+filepath.Dir(kubectlBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("kubectl istio-cni %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)) // BENCHMARKS.md
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

// requireWhyFromItsNode: `kubectl istio-cni why` for each meshed pod
// answers from the pod's node, by that node's agent, and reads it as
// redirected.
func requireWhyFromItsNode(t *testing.T, pods map[*cluster.Node]string) {
	t.Helper()
	agents := requireAgentsReady(t, env.fleet.Nodes)
	for n, pod := range pods {
		out, code := kubectlIstioCNI(t, "why", "default/"+pod)
		header := fmt.Sprintf("node:      %s (asked its agent, pod istio-cni/%s)", n.Name, agents[n.Name].Metadata.Name)
		if code != 0 || !strings.HasPrefix(out, header) || !strings.Contains(out, "on node "+n.Name) || !strings.Contains(out, "verdict:   ok: redirected") {
			t.Errorf("kubectl istio-cni why default/%s (exit %d), want it answered by %s's agent, redirected:\n%s", pod, code, n.Name, out)
		}
	}
}

// requireCheck runs `kubectl istio-cni check` until its exit status is
// want and each of the lines holds, for up to a minute (an agent's gauges
// and readiness settle after a change).
func requireCheck(t *testing.T, want int, lines ...string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("kubectl istio-cni check exits %d and says %q", want, lines), func() (bool, string) {
		out, code := kubectlIstioCNI(t, "check")
		for _, l := range lines {
			if !strings.Contains(out, l) {
				return false, fmt.Sprintf("exit %d, without %q:\n%s", code, l, out)
			}
		}
		return code == want, fmt.Sprintf("exit %d:\n%s", code, out)
	})
}
