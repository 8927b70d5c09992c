package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// podTimeout bounds a pod's start: image present, sandbox, CNI, containers.
const podTimeout = 2 * time.Minute

// The node's files the installer owns.
func pluginPath() string     { return filepath.Join(env.node.CNIBinDir, install.PluginBinary) }
func helperPath() string     { return filepath.Join(env.node.CNIBinDir, install.LookupBinary) }
func fullPath() string       { return filepath.Join(env.node.CNIBinDir, install.FullBinary) }
func kubeconfigPath() string { return filepath.Join(env.node.IstioRunDir, install.KubeconfigName) }
func ownedPath() string      { return filepath.Join(env.node.CNINetDir, "02-istio-cni.conflist") }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// daemonSetReady reports whether the DaemonSet's pod on the node is
// updated and ready, by a status that has seen the latest spec (right after
// a change, the status still describes the old one).
func daemonSetReady(ctx context.Context) (bool, string) {
	status, body, err := env.node.Do(ctx, http.MethodGet, "/apis/apps/v1/namespaces/istio-cni/daemonsets/istio-cni-node", nil)
	if err != nil || status != http.StatusOK {
		return false, fmt.Sprintf("GET DaemonSet: %d %s %v", status, body, err)
	}
	var ds struct {
		Metadata struct{ Generation int64 }
		Status   struct {
			ObservedGeneration                                          int64
			DesiredNumberScheduled, NumberReady, UpdatedNumberScheduled int
		}
	}
	if err := json.Unmarshal(body, &ds); err != nil {
		return false, err.Error()
	}
	s := ds.Status
	return s.ObservedGeneration == ds.Metadata.Generation && s.DesiredNumberScheduled == 1 && s.NumberReady == 1 &&
		s.UpdatedNumberScheduled == 1, fmt.Sprintf("generation %d, %+v", ds.Metadata.Generation, s)
}

// requireInstalled waits for the DaemonSet to be ready with a live agent:
// right after a change the DaemonSet can count a terminating pod as ready.
func requireInstalled(t *testing.T) {
	t.Helper()
	poll.Until(t, 3*time.Minute, "DaemonSet ready", func() (bool, string) {
		if ok, why := daemonSetReady(t.Context()); !ok {
			return false, why
		}
		p, ok := installerPodOrEmpty(t)
		return ok && allReady(p), fmt.Sprintf("installer pod %q: %+v", p.Metadata.Name, p.Status.ContainerStatuses)
	})
}

func allReady(p cluster.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return len(p.Status.ContainerStatuses) > 0
}

// installerPodOrEmpty returns the DaemonSet's pod that is not terminating.
func installerPodOrEmpty(t *testing.T) (cluster.Pod, bool) {
	t.Helper()
	for _, p := range installerPods(t) {
		if p.Metadata.DeletionTimestamp == nil {
			return p, true
		}
	}
	return cluster.Pod{}, false
}

// installerPods lists the DaemonSet's pods, terminating ones included.
func installerPods(t *testing.T) []cluster.Pod {
	t.Helper()
	status, body, err := env.node.Do(t.Context(), http.MethodGet,
		"/api/v1/namespaces/istio-cni/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dnode-agent", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("listing installer pods: %d %v", status, err)
	}
	var list struct{ Items []cluster.Pod }
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// startPod creates the pod, deletes it when the test ends, and waits for
// it to run.
func startPod(t *testing.T, s cluster.PodSpec) cluster.Pod {
	t.Helper()
	createPod(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	p, err := env.node.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func createPod(t *testing.T, s cluster.PodSpec) {
	t.Helper()
	if err := env.node.CreatePod(t.Context(), s.JSON()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		path := "/api/v1/namespaces/" + s.Namespace + "/pods/" + s.Name
		_, _, _ = env.node.Do(context.Background(), http.MethodDelete, path, nil)
	})
}

var serverOnce sync.Once

// server is a plain (unmeshed) server pod every app dials; it lives for
// the whole run. Its address is read afresh each time: a node reboot
// gives it a new sandbox, maybe a new IP.
func server(t *testing.T) string {
	t.Helper()
	s := cluster.PodSpec{Namespace: "default", Name: "server", Server: true}
	var err error
	serverOnce.Do(func() { err = env.node.CreatePod(context.Background(), s.JSON()) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), podTimeout)
	defer cancel()
	p, err := env.node.WaitRunning(ctx, s.Namespace, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)
}

// The ISTIO chains a redirected pod's nat table holds.
var istioChains = []string{":ISTIO_INBOUND ", ":ISTIO_IN_REDIRECT ", ":ISTIO_OUTPUT ", ":ISTIO_REDIRECT "}

// assertRedirected: the pod's netns holds exactly the rule model of a
// default sidecar (read as an operator would, nsenter + iptables-save), and
// its app's requests reach the proxy with the server's address as the
// original destination.
func assertRedirected(t *testing.T, p cluster.Pod) {
	t.Helper()
	rules, err := env.node.IptablesSave(t.Context(), p.Metadata.Namespace, p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range istioChains {
		if !strings.Contains(rules, c) {
			t.Errorf("%s/%s: iptables-save lacks chain %q:\n%s", p.Metadata.Namespace, p.Metadata.Name, c, rules)
		}
	}
	observed, err := iptables.ParseSave([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range iptables.Build(iptables.DefaultSpec(), true, false).Rulesets() {
		if d := iptables.Diff(rs, observed); len(d) > 0 {
			t.Errorf("%s/%s: rules differ from the model:\n%v\n%s", p.Metadata.Namespace, p.Metadata.Name, d, rules)
		}
	}
	assertWrittenBy(t, p)
	assertThroughProxy(t, p)
}

// nodeWritesNetlink: this node's iptables-nft is a release the plugin
// lays rules out as over netlink (release.Layouts; this machine's is
// Debian's 1.8.9).
func nodeWritesNetlink() bool {
	v, err := xtables.NFTVersion("iptables-restore")
	return err == nil && release.HasLayout(v)
}

// lastADD is the plugin's last successful ADD of the pod, from its log on
// the node; ok=false when it has none (rotated away?).
func lastADD(p cluster.Pod) (cluster.ADDLine, bool) {
	return cluster.LastADD(filepath.Join(env.node.IstioRunDir, install.LogDirName, install.PluginLogName), p.Metadata.Namespace, p.Metadata.Name)
}

// assertWrittenBy: the plugin's last ADD of the pod wrote its rules the way
// this node calls for: over netlink where its iptables-nft is the release
// the plugin reproduces, else with iptables-restore. The rules above were
// read with iptables-save either way. The pod was just redirected, so its
// ADD must be in the plugin's log (1 MiB and one rotated copy: thousands
// of ADDs).
func assertWrittenBy(t *testing.T, p cluster.Pod) {
	t.Helper()
	want := "iptables-restore"
	if nodeWritesNetlink() {
		want = "netlink"
	}
	last, ok := lastADD(p)
	switch {
	case !ok:
		t.Errorf("%s/%s: no successful ADD of it in the plugin's log %s: who wrote its rules is unknown",
			p.Metadata.Namespace, p.Metadata.Name, filepath.Join(env.node.IstioRunDir, install.LogDirName, install.PluginLogName))
	case last.RulesBy != want:
		t.Errorf("%s/%s: the plugin's last ADD wrote its rules by %q, want %q on this node", p.Metadata.Namespace, p.Metadata.Name, last.RulesBy, want)
	}
}

// assertThroughProxy: the pod's app's requests reach its proxy with the
// server's address as the original destination, and none reaches the
// server directly.
func assertThroughProxy(t *testing.T, p cluster.Pod) {
	t.Helper()
	want := "proxy listener=outbound orig=" + server(t)
	poll.Until(t, 30*time.Second, "the app's request through the proxy", func() (bool, string) {
		log := env.node.ContainerLog(p, "app")
		return strings.Contains(log, want), log
	})
	if log := env.node.ContainerLog(p, "app"); strings.Contains(log, "server name=server") {
		t.Errorf("a request bypassed the proxy:\n%s", log)
	}
}

// assertDirect: no ISTIO chain in the pod's netns, and its app's requests
// reach the server itself.
func assertDirect(t *testing.T, p cluster.Pod) {
	t.Helper()
	rules, err := env.node.IptablesSave(t.Context(), p.Metadata.Namespace, p.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rules, "ISTIO_") {
		t.Errorf("%s/%s: unmeshed pod has ISTIO rules:\n%s", p.Metadata.Namespace, p.Metadata.Name, rules)
	}
	poll.Until(t, 30*time.Second, "the app's request straight to the server", func() (bool, string) {
		log := env.node.ContainerLog(p, "app")
		return strings.Contains(log, "server name=server"), log
	})
	if log := env.node.ContainerLog(p, "app"); strings.Contains(log, "proxy listener") {
		t.Errorf("an unmeshed pod's request went to a proxy:\n%s", log)
	}
}

func meshedPod(t *testing.T, name string) cluster.PodSpec {
	return cluster.PodSpec{Namespace: "default", Name: name, Target: server(t), Sidecar: true}
}

// applyManifest applies YAML and deletes it when the test ends.
func applyManifest(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", f)
	t.Cleanup(func() {
		if out, err := env.node.Kubectl(context.Background(), "delete", "-f", f, "--ignore-not-found"); err != nil {
			t.Errorf("deleting %s: %v\n%s", f, err, out)
		}
	})
}

// agentPodStates says what became of each agent pod: for a failure's
// message.
func agentPodStates(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, p := range installerPods(t) {
		fmt.Fprintf(&b, "%s phase=%s", p.Metadata.Name, p.Status.Phase)
		if d := p.Metadata.DeletionTimestamp; d != nil {
			fmt.Fprintf(&b, " deleting since %v", time.Since(*d).Round(time.Second))
		}
		b.WriteString("; ")
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// ensureInstalled reinstalls istio-cni if a failed test left it deleted.
// It runs in a Cleanup, after t.Context() is cancelled.
func ensureInstalled(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if status, _, err := env.node.Do(ctx, http.MethodGet, "/apis/apps/v1/namespaces/istio-cni/daemonsets/istio-cni-node", nil); err == nil && status == http.StatusOK {
		return
	}
	if err := poll.Wait(2*time.Minute, "namespace istio-cni gone or active", func() (bool, string) {
		status, body, err := env.node.Do(ctx, http.MethodGet, "/api/v1/namespaces/istio-cni", nil)
		return err == nil && (status == http.StatusNotFound || !strings.Contains(string(body), "Terminating")), fmt.Sprint(status, err)
	}); err != nil {
		t.Errorf("reinstalling after the failure: %v", err)
		return
	}
	if out, err := env.node.Kubectl(ctx, "apply", "-k", env.overlay); err != nil {
		t.Errorf("reinstalling after the failure: %v\n%s", err, out)
	}
}

// logLinesMentioning is the last n lines of a node component's log that
// mention s: for a failure's message.
func logLinesMentioning(component, s string, n int) string {
	if s == "" {
		return "(nothing to look for)"
	}
	b, err := os.ReadFile(filepath.Join(env.node.Dir, component+".log"))
	if err != nil {
		return err.Error()
	}
	var lines []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
