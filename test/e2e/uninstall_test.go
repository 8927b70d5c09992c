package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// The tests below change the install itself; they run last, in order, and
// each leaves istio-cni installed again except the last.

// 12. The installer pod is deleted (a restart): the files stay, and a
// meshed pod started meanwhile is redirected.
func TestRestart(t *testing.T) {
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
	assertRedirected(t, startPod(t, meshedPod(t, "after-restart")))
}

// 13. A rolling upgrade (a new image tag applied): while the old agent
// stops and the new one starts, meshed pods keep being created; every one
// starts at its first attempt, redirected.
func TestRollingUpgrade(t *testing.T) {
	requireInstalled(t)
	const next = "localhost/istio-cni/install-cni:0.1.0-next"
	if err := env.node.TagImage(t.Context(), "localhost/istio-cni/install-cni:0.1.0", next); err != nil {
		t.Fatal(err)
	}
	old := installerPod(t)
	meshedDuring(t, "upgrade", func() {
		if _, err := env.node.Kubectl(t.Context(), "-n", "istio-cni", "set", "image", "daemonset/istio-cni-node", "install-cni="+next); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 2*time.Minute, "the new agent running the new image", func() (bool, string) {
			p, ok := installerPodOrEmpty(t)
			return ok && p.Metadata.Name != old && allReady(p) && len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Image == next, p.Metadata.Name
		})
		requireInstalled(t)
	})
}

// 14. A delete and recreate of the DaemonSet (Argo CD's Replace, kubectl
// replace --force): the old agent sees its DaemonSet replaced and keeps the
// files, which never go missing; meshed pods created meanwhile start at
// their first attempt, redirected.
func TestDeleteAndRecreate(t *testing.T) {
	requireInstalled(t)
	old, _ := installerPodOrEmpty(t)
	oldLog := followLog(old)
	gaps := watchFiles(t)
	meshedDuring(t, "replace", func() {
		if err := replaceDaemonSet(t.Context(), t, true); err != nil {
			t.Fatal(err)
		}
		requireInstalled(t)
	})
	if g := gaps(); len(g) > 0 {
		t.Errorf("istio-cni's files went missing during the delete and recreate: %v", g)
	}
	if log := oldLog(); !strings.Contains(log, "replaced") || strings.Contains(log, `"msg":"uninstalling"`) {
		t.Errorf("the old agent %s (uid %s), %d bytes of log; its shutdown:\n%s", old.Metadata.Name, old.Metadata.UID, len(log), lastLines(log, 5))
	}
}

// replaceDaemonSet deletes and recreates the DaemonSet as rendered from the
// overlay (kubectl replace --force, as Argo CD's Replace does), and, with
// wait, waits for the new one's rollout.
func replaceDaemonSet(ctx context.Context, t *testing.T, wait bool) error {
	rendered, err := env.node.Kubectl(ctx, "kustomize", env.overlay)
	if err != nil {
		return err
	}
	path := filepath.Join(t.TempDir(), "daemonset.yaml")
	if err := os.WriteFile(path, []byte(daemonSetDoc(t, rendered)), 0o600); err != nil {
		return err
	}
	if out, err := env.node.Kubectl(ctx, "replace", "--force", "-f", path); err != nil {
		return fmt.Errorf("kubectl replace --force: %w\n%s", err, out)
	}
	if !wait {
		return nil
	}
	_, err = env.node.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=3m")
	return err
}

// 15. Every way kubectl removes the install leaves a node that starts
// pods: nothing of istio-cni's is left in the CNI bin dir, net.d or the
// run dir, the primary's config is untouched, and a plain pod in default
// is Ready within 60 s. After each, istio-cni is installed again.
func TestUninstallPaths(t *testing.T) {
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, way := range []struct {
		name string
		args []string
	}{
		{"daemonset", []string{"-n", "istio-cni", "delete", "daemonset", "istio-cni-node"}},
		{"delete-k", []string{"delete", "-k", env.overlay}},
		{"delete-f", []string{"delete", "-f", filepath.Join(base, "base")}},
		{"namespace", []string{"delete", "namespace", "istio-cni"}},
	} {
		t.Run(way.name, func(t *testing.T) {
			requireInstalled(t)
			agent, _ := installerPodOrEmpty(t)
			agentLog := followLog(agent)
			if out, err := env.node.Kubectl(t.Context(), append(way.args, "--wait=false")...); err != nil {
				t.Fatalf("kubectl %v: %v\n%s", way.args, err, out)
			}
			waitUninstalled(t)
			t.Logf("the agent's shutdown: %s", uninstallReason(agentLog()))
			assertNodeStartsPlainPods(t, "after-"+way.name)
			reinstall(t)
		})
	}
}

// 16. The agent is not running when istio-cni is deleted (the node was
// down, or the agent crash-looping): the node's files stay. Plain pods
// still start (no credential needed for them), but every meshed pod fails
// closed: the plugin's credentials are revoked. The documented cleanup,
// deployments/optional/uninstall-node-job.yaml, removes the files. Last:
// it leaves istio-cni uninstalled.
func TestCleanupAfterUninstallWithoutAgent(t *testing.T) {
	requireInstalled(t)
	agentCrashLooping(t)
	if out, err := env.node.Kubectl(t.Context(), "delete", "-k", env.overlay, "--wait=true"); err != nil {
		t.Fatalf("kubectl delete -k: %v\n%s", err, out)
	}
	assertFilesStay(t, "an uninstall without an agent")
	assertNodeStartsPlainPods(t, "plain-files-left")
	// What this cleans: a meshed pod cannot start.
	stuck := meshedPod(t, "stuck")
	createPod(t, stuck)
	poll.Until(t, time.Minute, "the meshed pod failing at its sandbox", func() (bool, string) {
		out, _ := env.node.Kubectl(t.Context(), "get", "events", "-n", "default", "--field-selector",
			"involvedObject.name=stuck,reason=FailedCreatePodSandBox", "-o", "custom-columns=MESSAGE:.message")
		return strings.Contains(out, "istio-cni"), out
	})
	// With no agent, the node's own log says why.
	nodeLog := filepath.Join(env.node.IstioRunDir, install.LogDirName, install.PluginLogName)
	poll.Until(t, 30*time.Second, "the failed ADD in the plugin's log on the node", func() (bool, string) {
		data, err := os.ReadFile(nodeLog) // #nosec G304 -- the test node's file
		return bytes.Contains(data, []byte(`"pod":"default/stuck"`)), fmt.Sprintf("%s: %v\n%s", nodeLog, err, lastLines(string(data), 3))
	})
	job, err := env.node.UninstallJob(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := env.node.Kubectl(t.Context(), "apply", "-f", job); err != nil {
		t.Fatalf("applying the uninstall Job: %v\n%s", err, out)
	}
	name := "job/istio-cni-uninstall-" + env.node.Name
	if out, err := env.node.Kubectl(t.Context(), "-n", "kube-system", "wait", "--for=condition=complete", name, "--timeout=2m"); err != nil {
		logs, _ := env.node.Kubectl(t.Context(), "-n", "kube-system", "describe", name)
		t.Fatalf("the uninstall Job: %v\n%s\n%s", err, out, logs)
	}
	waitUninstalled(t)
	assertNodeStartsPlainPods(t, "after-cleanup")
}

// watchFiles polls istio-cni's files every 2 ms until the returned function
// is called; that says which went missing, and when.
func watchFiles(t *testing.T) func() []string {
	t.Helper()
	var mu sync.Mutex
	var gaps []string
	start := time.Now()
	stop := poll.Every(2*time.Millisecond, func() {
		for _, p := range []string{pluginPath(), kubeconfigPath(), ownedPath()} {
			if !exists(p) {
				mu.Lock()
				gaps = append(gaps, fmt.Sprintf("%s at %v", filepath.Base(p), time.Since(start).Round(time.Millisecond)))
				mu.Unlock()
			}
		}
	})
	t.Cleanup(stop)
	return func() []string {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return gaps
	}
}

// waitUninstalled waits until nothing of istio-cni is left on the node
// and no agent pod runs, and checks the primary's config is untouched.
func waitUninstalled(t *testing.T) { t.Helper(); waitUninstalledFrom(t, false) }

// waitUninstalledFrom waits until nothing of istio-cni is left on the
// node. Owned, the primary's file is byte for byte what it was; inplace
// (our entry was in it), the same JSON.
func waitUninstalledFrom(t *testing.T, inplace bool) {
	t.Helper()
	poll.Until(t, time.Minute, "uninstalled", func() (bool, string) {
		var left []string
		for _, p := range []string{pluginPath(), fullPath(), helperPath()} {
			if exists(p) {
				left = append(left, p)
			}
		}
		cd, _ := install.ReadConfDir(env.node.CNINetDir)
		for _, f := range cd.Files {
			if chain.HasEntry(f.Data) {
				left = append(left, f.Name)
			}
		}
		run, _ := os.ReadDir(env.node.IstioRunDir)
		for _, e := range run {
			left = append(left, filepath.Join(env.node.IstioRunDir, e.Name()))
		}
		return len(left) == 0 && len(installerPods(t)) == 0, fmt.Sprint("left: ", left, "; agent pods: ", len(installerPods(t)))
	})
	if b, _ := os.ReadFile(env.node.PrimaryConfig); !bytes.Equal(b, env.primary) && !inplace {
		t.Errorf("primary conflist changed by the uninstall:\n%s\nwant:\n%s", b, env.primary)
	} else if !sameJSON(b, env.primary) {
		t.Errorf("primary conflist after taking our entry out of it:\n%s\nwant (as JSON):\n%s", b, env.primary)
	}
}

// sameJSON: a and b are the same JSON value, whatever their layout.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// assertNodeStartsPlainPods: a plain pod in default is Ready within 60 s
// and reaches the server directly.
func assertNodeStartsPlainPods(t *testing.T, name string) {
	t.Helper()
	s := cluster.PodSpec{Namespace: "default", Name: name, Target: server(t)}
	createPod(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p, err := env.node.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatalf("a plain pod after the uninstall: %v", err)
	}
	assertDirect(t, p)
}

// reinstall applies the overlay again once the namespace is gone.
func reinstall(t *testing.T) {
	t.Helper()
	namespaceUsable(t)
	if out, err := env.node.Kubectl(t.Context(), "apply", "-k", env.overlay); err != nil {
		t.Fatalf("reinstalling: %v\n%s", err, out)
	}
	requireInstalled(t)
}

// followLog keeps copying an agent pod's log, which the node removes soon
// after the pod is gone, until the returned function is called; that
// returns the last copy.
func followLog(p cluster.Pod) func() string {
	var mu sync.Mutex
	var last string
	stop := poll.Every(100*time.Millisecond, func() {
		if log := env.node.ContainerLog(p, "install-cni"); len(log) > 0 {
			mu.Lock()
			last = log
			mu.Unlock()
		}
	})
	return func() string {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// uninstallReason is the agent's line saying why it uninstalled.
func uninstallReason(log string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, `"msg":"uninstalling"`) {
			return strings.TrimSpace(line)
		}
	}
	return "no uninstall line:\n" + lastLines(log, 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// daemonSetDoc picks the DaemonSet out of a multi-document rendering.
func daemonSetDoc(t *testing.T, rendered string) string {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if strings.Contains(doc, "\nkind: DaemonSet\n") || strings.HasPrefix(doc, "kind: DaemonSet\n") {
			return doc
		}
	}
	t.Fatalf("no DaemonSet in:\n%s", rendered)
	return ""
}

// 17. Istio users install with Helm: `helm install` of
// deployments/helm/istio-cni with upstream istio-cni's own values file
// (-f, read from the pinned istio.io/istio module, as a user switching
// charts brings it; the node's paths and ports set as values, as a
// platform's would be) makes the node redirect a meshed pod, and `helm
// uninstall` leaves a node that starts plain pods with nothing of
// istio-cni left. Upstream's values ask for its entry inside the
// primary's own file (istioOwnedCNIConfig: false), and get it.
func TestHelmInstallAndUninstall(t *testing.T) {
	reinstallReady(t) // the namespace of the previous install gone
	helmNamespace(t)
	args := helmInstallArgs(t, nil)
	out := runHelm(t, args...)
	// Upstream's values that cannot apply are named at install.
	if !strings.Contains(out, "ambient.*: istio-cni is sidecar-only") {
		t.Errorf("helm install's notes name no upstream value left unused:\n%s", out)
	}
	requireInstalled(t)
	if primary, err := os.ReadFile(env.node.PrimaryConfig); exists(ownedPath()) || err != nil || !strings.Contains(string(primary), `"`+chain.PluginType+`"`) {
		t.Errorf("upstream's istioOwnedCNIConfig false: our own conflist exists %v (%v); want our entry in %s", exists(ownedPath()), err, env.node.PrimaryConfig)
	}
	// A settings change through `helm upgrade --set` rolls the agent by
	// itself (the settings' checksum on its pod template).
	installed, _ := installerPodOrEmpty(t)
	upgrade := append([]string{"upgrade"}, args[1:]...)
	runHelm(t, append(upgrade, "--set", "logging.level=debug")...)
	agent := requireAgentRolled(t, installed, "DEBUG")
	agentLog := followLog(agent)
	assertRedirected(t, startPod(t, meshedPod(t, "helm-meshed")))
	runHelm(t, "uninstall", "istio-cni", "--namespace", "istio-cni", "--wait")
	waitUninstalledFrom(t, true)
	t.Logf("the agent's shutdown: %s", uninstallReason(agentLog()))
	assertNodeStartsPlainPods(t, "after-helm-uninstall")

	// `helm uninstall --cascade=orphan`: the DaemonSet and the
	// ServiceAccounts go, the agent's pod stays and never gets SIGTERM. It
	// sees istio-cni gone around it and uninstalls while it runs.
	runHelm(t, args...)
	requireInstalled(t)
	orphan, _ := installerPodOrEmpty(t)
	orphanLog := followLog(orphan)
	runHelm(t, "uninstall", "istio-cni", "--namespace", "istio-cni", "--cascade=orphan")
	poll.Until(t, 2*time.Minute, "the orphaned agent uninstalling while it runs", func() (bool, string) {
		return !exists(ownedPath()) && !exists(pluginPath()), "files left"
	})
	if p, found, err := env.node.GetPod(t.Context(), "istio-cni", orphan.Metadata.Name); err != nil || !found || p.Metadata.DeletionTimestamp != nil {
		t.Errorf("the orphaned agent %s: found %v, %v; want it still running", orphan.Metadata.Name, found, err)
	}
	assertNodeStartsPlainPods(t, "after-orphaning")
	// What users do next: delete the orphan. Its shutdown has nothing left
	// to do.
	kubectl(t, "-n", "istio-cni", "delete", "pod", orphan.Metadata.Name, "--wait=true")
	t.Logf("the orphaned agent: %s", uninstallReason(orphanLog()))
	waitUninstalledFrom(t, true)
}

// reinstallReady waits until the istio-cni namespace of an earlier install
// is gone.
func reinstallReady(t *testing.T) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "namespace istio-cni gone", func() (bool, string) {
		status, _, err := env.node.Do(t.Context(), http.MethodGet, "/api/v1/namespaces/istio-cni", nil)
		return err == nil && status == http.StatusNotFound, fmt.Sprint(status, err)
	})
}
