package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A rebooted node starts pods with no agent (issue 44). The node's primary
// says cniVersion 1.1.0, as current clusters' do, and so does the config
// the agent writes from it: containerd 2 then runs every chained plugin's
// STATUS whenever kubelet asks for the runtime's status, and an error
// makes NetworkReady false and the Node NotReady. A reboot empties the
// run directory (a tmpfs) and with it the plugin's kubeconfig, which only
// an agent writes again. Each test leaves istio-cni installed and ready.

// 12c. The node reboots while the agent crash-loops (a bad upgrade): after
// it, the kubeconfig is gone, yet the Node stays Ready and the runtime's
// network ready all the while pods start: a plain pod runs, a meshed pod
// fails closed at its sandbox. Once the agent is back, the meshed pod runs,
// redirected.
func TestRebootWhileAgentCrashLoops(t *testing.T) {
	requireInstalled(t)
	assertCNIVersion(t, cluster.DefaultPrimaryCNIVersion)
	restore := agentCrashLooping(t)
	restored := false
	t.Cleanup(func() {
		if !restored {
			restore()
			waitNodeReady(t)
		}
	})
	assertRuntimeRunsStatus(t)
	rebootLosingKubeconfig(t, nil)

	done := watchReadiness(t)
	meshed := assertPodsStartWithoutKubeconfig(t, "rebooted")
	restore()
	restored = true
	requireInstalled(t)
	assertRunsRedirected(t, meshed)
	done()
}

// 12d. The DaemonSet's nodeSelector moved the agent off the node while it
// was down: the agent never ran its uninstall, so the node's files still
// chain istio-cni, with no kubeconfig. The Node stays Ready while a plain
// pod runs and a meshed pod fails closed at its sandbox; the selector back,
// the agent comes back and the meshed pod runs, redirected.
func TestRebootWhileAgentMovedOff(t *testing.T) {
	requireInstalled(t)
	away := false
	t.Cleanup(func() {
		if away {
			agentBack(t)
			waitNodeReady(t)
		}
	})
	rebootLosingKubeconfig(t, func() error {
		away = true
		out, err := env.node.Kubectl(context.Background(), "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", awaySelector)
		if err != nil {
			return fmt.Errorf("moving the agent off: %w\n%s", err, out)
		}
		return nil
	})
	poll.Until(t, 2*time.Minute, "no agent pod, not even a terminating one", func() (bool, string) {
		return len(installerPods(t)) == 0, agentPodStates(t)
	})
	for _, p := range []string{pluginPath(), fullPath(), helperPath()} {
		if !exists(p) {
			t.Errorf("%s is gone: the agent uninstalled, which this test is not about", p)
		}
	}
	if owned, err := os.ReadFile(ownedPath()); err != nil || !chain.HasEntry(owned) {
		t.Fatalf("the runtime's config %s should still chain istio-cni (%v):\n%s", ownedPath(), err, owned)
	}

	done := watchReadiness(t)
	meshed := assertPodsStartWithoutKubeconfig(t, "rebooted-away")
	agentBack(t)
	away = false
	requireInstalled(t)
	assertRunsRedirected(t, meshed)
	done()
}

// assertCNIVersion: the primary's conflist and the one the agent writes
// from it say want.
func assertCNIVersion(t *testing.T, want string) {
	t.Helper()
	for _, path := range []string{env.node.PrimaryConfig, ownedPath()} {
		data, err := os.ReadFile(path) // #nosec G304 -- the node's CNI configs
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(data, &conf); err != nil || conf.CNIVersion != want {
			t.Fatalf("%s: cniVersion %q (%v), want %q", path, conf.CNIVersion, err, want)
		}
	}
}

// assertRuntimeRunsStatus shows that the runtime's NetworkReady is istio-cni's
// STATUS answer: with no agent to put it back, the full plugin (which the
// shim execs for STATUS) moved away turns it false, naming istio-cni; back,
// true again.
func assertRuntimeRunsStatus(t *testing.T) {
	t.Helper()
	networkReady := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			ready, msg, err := env.node.NetworkReady(t.Context())
			return err == nil && ready == want && (want || strings.Contains(msg, "istio-cni")), fmt.Sprintf("ready=%v %q %v", ready, msg, err)
		}
	}
	poll.Until(t, 30*time.Second, "the runtime's network ready", networkReady(true))
	aside := fullPath() + ".e2e-aside"
	if err := os.Rename(fullPath(), aside); err != nil {
		t.Fatal(err)
	}
	moved := true
	t.Cleanup(func() {
		if moved {
			_ = os.Rename(aside, fullPath())
		}
	})
	poll.Until(t, 30*time.Second, "the runtime's network not ready by istio-cni's STATUS", networkReady(false))
	if err := os.Rename(aside, fullPath()); err != nil {
		t.Fatal(err)
	}
	moved = false
	poll.Until(t, 30*time.Second, "the runtime's network ready again", networkReady(true))
}

// rebootLosingKubeconfig reboots the node, running whileDown (if set) while
// it is down, and checks the reboot took the plugin's kubeconfig, which
// nothing writes again while no agent runs. It returns once the server
// pod runs again in a new sandbox, so that its address is current.
func rebootLosingKubeconfig(t *testing.T, whileDown func() error) {
	t.Helper()
	server(t) // it exists before the reboot, to be restarted by it
	if !exists(kubeconfigPath()) {
		t.Fatalf("%s missing before the reboot", kubeconfigPath())
	}
	goneWhileDown := false
	rebooted := time.Now()
	err := env.node.Reboot(t.Context(), cluster.RebootOptions{WhileDown: func() error {
		goneWhileDown = !exists(kubeconfigPath())
		if whileDown != nil {
			return whileDown()
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !goneWhileDown {
		t.Fatalf("%s still there while the node was down: the reboot should empty the run directory", kubeconfigPath())
	}
	poll.Until(t, podTimeout, "the server running again after the reboot", func() (bool, string) {
		p, found, err := env.node.GetPod(t.Context(), "default", "server")
		if err != nil || !found || len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Sprintf("%+v %v %v", p.Status, found, err)
		}
		c := p.Status.ContainerStatuses[0]
		var running struct{ StartedAt time.Time }
		if raw, ok := c.State["running"]; ok {
			_ = json.Unmarshal(raw, &running)
		}
		return p.Status.Phase == "Running" && c.Ready && running.StartedAt.After(rebooted.Truncate(time.Second)), fmt.Sprintf("%+v", c)
	})
}

// assertPodsStartWithoutKubeconfig: with the plugin's kubeconfig gone and
// no agent, a plain pod runs and a meshed pod (returned, to be checked
// once the agent is back) fails closed at its sandbox.
func assertPodsStartWithoutKubeconfig(t *testing.T, name string) cluster.PodSpec {
	t.Helper()
	if exists(kubeconfigPath()) {
		t.Fatalf("%s is back with no agent on the node", kubeconfigPath())
	}
	assertNodeStartsPlainPods(t, "plain-"+name)
	meshed := meshedPod(t, "meshed-"+name)
	createPod(t, meshed)
	assertFailsClosed(t, meshed)
	if exists(kubeconfigPath()) {
		t.Fatalf("%s is back with no agent on the node", kubeconfigPath())
	}
	return meshed
}

// assertFailsClosed: the meshed pod's sandbox fails at istio-cni and none
// of its containers starts.
func assertFailsClosed(t *testing.T, s cluster.PodSpec) {
	t.Helper()
	poll.Until(t, time.Minute, "the meshed pod failing closed at its sandbox", func() (bool, string) {
		ev := env.node.PodEvents(t.Context(), s.Namespace, s.Name)
		return strings.Contains(ev, "FailedCreatePodSandBox") && strings.Contains(ev, "istio-cni"), ev
	})
	if p, found, err := env.node.GetPod(t.Context(), s.Namespace, s.Name); err != nil || !found || p.Status.Phase != "Pending" || anyStarted(p) {
		t.Fatalf("the meshed pod without its rules: %+v, %v: want Pending, no container started", p.Status, err)
	}
}

// assertRunsRedirected: kubelet's retry starts the pod, redirected.
func assertRunsRedirected(t *testing.T, s cluster.PodSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	p, err := env.node.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	assertRedirected(t, p)
}

// watchReadiness samples, until the returned function is called, the
// Node's Ready condition and the runtime's NetworkReady (asked through
// the CRI, which runs the chain's STATUS each time); that function fails
// the test for every sample that was not ready. A sample the API server or
// the CRI did not answer says nothing and is only counted.
func watchReadiness(t *testing.T) func() {
	t.Helper()
	var (
		mu                  sync.Mutex
		samples, unanswered int
		notReady            []string
	)
	stop := poll.Every(500*time.Millisecond, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		node, nodeMsg, nodeErr := env.node.NodeReady(ctx)
		network, netMsg, netErr := env.node.NetworkReady(ctx)
		at := time.Now().Format("15:04:05.000")
		mu.Lock()
		defer mu.Unlock()
		samples++
		if nodeErr != nil || netErr != nil {
			unanswered++
		}
		if nodeErr == nil && !node {
			notReady = append(notReady, at+" Node not Ready: "+nodeMsg)
		}
		if netErr == nil && !network {
			notReady = append(notReady, at+" runtime NetworkReady false: "+netMsg)
		}
	})
	t.Cleanup(stop)
	return func() {
		t.Helper()
		stop()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("readiness: %d samples, %d unanswered, %d not ready", samples, unanswered, len(notReady))
		if samples == unanswered {
			t.Errorf("readiness: none of %d samples answered", samples)
		}
		if len(notReady) > 0 {
			t.Errorf("the node was not ready while pods started without a kubeconfig (%d times); first:\n%s",
				len(notReady), strings.Join(notReady[:min(len(notReady), 5)], "\n"))
		}
	}
}

// waitNodeReady, in a cleanup (t.Context() is cancelled then), waits for
// the Node to be Ready again after a failure, for the tests that follow.
func waitNodeReady(t *testing.T) {
	t.Helper()
	if err := poll.Wait(3*time.Minute, "the Node Ready again", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, msg, err := env.node.NodeReady(ctx)
		return err == nil && ready, fmt.Sprint(msg, err)
	}); err != nil {
		t.Error(err)
	}
}
