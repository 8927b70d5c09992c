package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// nodeWithoutPrimary is what a node showed once istio-cni's agent had
// installed itself there, before any primary CNI.
type nodeWithoutPrimary struct {
	netd       []string // the files in its /etc/cni/net.d
	agentReady bool
	nodeReady  bool
}

// waitAgentsWithoutPrimary waits until every node's agent has installed
// the plugin and its kubeconfig (it has run its install pass), then
// records what each node shows.
func waitAgentsWithoutPrimary(ctx context.Context, fleet *cluster.Fleet) (map[string]nodeWithoutPrimary, error) {
	err := poll.Wait(3*time.Minute, "istio-cni's agent installed on every node", func() (bool, string) {
		for _, n := range fleet.Nodes {
			for _, f := range []string{filepath.Join(n.CNIBinDir, install.PluginBinary), filepath.Join(n.IstioRunDir, install.KubeconfigName)} {
				if _, err := os.Stat(f); err != nil {
					return false, fmt.Sprintf("node %s: %v", n.Name, err)
				}
			}
		}
		return true, ""
	})
	if err != nil {
		return nil, err
	}
	pods, err := agentPods(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]nodeWithoutPrimary{}
	for _, n := range fleet.Nodes {
		entries, err := os.ReadDir(n.CNINetDir)
		if err != nil {
			return nil, err
		}
		var s nodeWithoutPrimary
		for _, e := range entries {
			s.netd = append(s.netd, e.Name())
		}
		p, ok := pods[n.Name]
		s.agentReady = ok && allReady(p)
		if s.nodeReady, _, err = n.NodeReady(ctx); err != nil {
			return nil, err
		}
		seen[n.Name] = s
	}
	return seen, nil
}

// TestIstioCNIBeforeFlannel: installed before the primary (the fleet's
// bring-up, installBeforeFlannel), istio-cni's agent installs the plugin,
// writes no config of its own and is not Ready while the node has no
// primary, and the node stays NotReady; once Flannel writes its conflist,
// istio-cni's chains after it (Flannel's cniVersion, name and plugins,
// then istio-cni), and a meshed pod on every node starts at its first
// sandbox attempt with its rules.
func TestIstioCNIBeforeFlannel(t *testing.T) {
	for _, n := range env.fleet.Nodes {
		before, ok := env.beforeFlannel[n.Name]
		switch {
		case !ok:
			t.Errorf("node %s: nothing recorded before Flannel", n.Name)
		case len(before.netd) != 0 || before.agentReady || before.nodeReady:
			t.Errorf("node %s before Flannel: /etc/cni/net.d %v (want empty), agent Ready %v, node Ready %v (want neither)",
				n.Name, before.netd, before.agentReady, before.nodeReady)
		}
		data, err := os.ReadFile(ownedPath(n))
		if err != nil {
			t.Fatal(err)
		}
		var owned struct {
			CNIVersion string `json:"cniVersion"`
			Name       string
			Plugins    []struct{ Type string }
		}
		if err := json.Unmarshal(data, &owned); err != nil {
			t.Fatalf("node %s: %s: %v", n.Name, ownedPath(n), err)
		}
		var types []string
		for _, p := range owned.Plugins {
			types = append(types, p.Type)
		}
		if owned.CNIVersion != "0.3.1" || owned.Name != "cbr0" || !slices.Equal(types, []string{"flannel", "portmap", "istio-cni"}) {
			t.Errorf("node %s: istio-cni's conflist is %s %s %v; want Flannel's 0.3.1 cbr0 [flannel portmap] then istio-cni:\n%s",
				n.Name, owned.CNIVersion, owned.Name, types, data)
		}
	}
	target := serverAddr(t)
	for _, n := range env.fleet.Nodes {
		name := "after-flannel-" + strings.TrimPrefix(n.Name, "istio-cni-fleet-")
		p := startPod(t, n, cluster.PodSpec{Namespace: "default", Name: name, Target: target, Sidecar: true, NodeName: n.Name})
		requireFirstAttempt(t, n, p)
		rules, err := n.IptablesSave(t.Context(), "default", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(rules, "-A ISTIO_OUTPUT") || !strings.Contains(rules, "-A PREROUTING -p tcp -j ISTIO_INBOUND") {
			t.Errorf("node %s: meshed pod %s has no redirection:\n%s", n.Name, name, rules)
		}
		if !n.Subnet.Contains(mustAddr(t, p.Status.PodIP)) {
			t.Errorf("node %s: pod %s has %s, outside the node's Flannel lease %s", n.Name, name, p.Status.PodIP, n.Subnet)
		}
	}
}

// TestMeshedAcrossFlannel: between nodes over Flannel's vxlan overlay, a
// meshed server's inbound traffic goes through its proxy, which sees the
// calling pod's own address (no NAT between pods), and a meshed client's
// outbound traffic goes through its proxy with the server as the original
// destination; inspect, run on each node, says both pods are redirected
// and the plain one is not. (The test proxy answers rather than forwards,
// so each direction is its own request.)
func TestMeshedAcrossFlannel(t *testing.T) {
	from, to := env.fleet.Nodes[0], env.fleet.Nodes[len(env.fleet.Nodes)-1]
	server := startPod(t, to, cluster.PodSpec{Namespace: "default", Name: "flannel-mserver", Server: true, Sidecar: true, NodeName: to.Name})
	target := fmt.Sprintf("%s:%d", server.Status.PodIP, cluster.ServerPort)
	// Carried by Flannel: nothing else routes one node's pods to another's.
	if out, err := from.Command(t.Context(), "ip", "route", "get", server.Status.PodIP).CombinedOutput(); err != nil || !strings.Contains(string(out), " dev flannel.1 ") {
		t.Errorf("node %s routes %s %s (%v); want through flannel.1, Flannel's vxlan device", from.Name, server.Status.PodIP, out, err)
	}
	meshed := startPod(t, from, cluster.PodSpec{Namespace: "default", Name: "flannel-mclient", Target: target, Sidecar: true, NodeName: from.Name})
	plain := startPod(t, from, cluster.PodSpec{Namespace: "default", Name: "flannel-pclient", Target: target, NodeName: from.Name})

	inbound := "proxy listener=inbound orig=" + target + " peer=" + plain.Status.PodIP + ":"
	poll.Until(t, 30*time.Second, "the plain client's request through the meshed server's inbound proxy, from its own address", func() (bool, string) {
		log := from.ContainerLog(plain, "app")
		return strings.Contains(log, inbound), log
	})
	outbound := "proxy listener=outbound orig=" + target
	poll.Until(t, 30*time.Second, "the meshed client's request through its outbound proxy", func() (bool, string) {
		log := from.ContainerLog(meshed, "app")
		return strings.Contains(log, outbound), log
	})
	for _, c := range []struct {
		n    *cluster.Node
		pod  string
		want string
	}{
		{to, "flannel-mserver", "verdict:   ok: redirected"},
		{from, "flannel-mclient", "verdict:   ok: redirected"},
		{from, "flannel-pclient", "not redirected: no istio-proxy container"},
	} {
		out, code := inspectOn(t, c.n, "default/"+c.pod)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("inspect default/%s on %s (exit %d) lacks %q:\n%s", c.pod, c.n.Name, code, c.want, out)
		}
	}
}

// requireFirstAttempt fails unless the pod's only sandbox is its first.
func requireFirstAttempt(t *testing.T, n *cluster.Node, p cluster.Pod) {
	t.Helper()
	attempts, err := n.SandboxAttempts(t.Context(), p.Metadata.UID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(attempts, []uint32{0}) {
		t.Errorf("pod %s on %s: sandbox attempts %v, want only the first (0)\n%s", p.Metadata.Name, n.Name, attempts, n.PodEvents(t.Context(), p.Metadata.Namespace, p.Metadata.Name))
	}
}

// inspectOn runs install-cni inspect on node n, in its namespaces and
// with its paths, as an operator's shell there would, and returns its
// output and exit status.
func inspectOn(t *testing.T, n *cluster.Node, pod string) (string, int) {
	t.Helper()
	out, err := n.Command(t.Context(), env.installCNI, "inspect", "--kubeconfig", env.fleet.Kubeconfig,
		"--run-dir", "/run/istio-cni", "--cni-net-dir", "/etc/cni/net.d", "--netns-dir", "/run/netns", pod).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

// TestNodeJoinsAfterInstall: a node that joins once Flannel and istio-cni
// run gets both from their DaemonSets (Flannel's config, then istio-cni's
// chained after it), turns Ready, and starts a meshed pod at its first
// attempt with its rules; across the overlay, its meshed app's request
// goes through the proxy and its plain app's reaches the server on
// another node. The node leaves when the test ends.
func TestNodeJoinsAfterInstall(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	target := serverAddr(t)
	n, err := env.fleet.AddNode(t.Context(), env.images...)
	if n != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := env.fleet.RemoveNode(ctx, n); err != nil {
				t.Errorf("removing the joined node: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
	defer cancel()
	if err := env.fleet.WaitNodeReady(ctx, n); err != nil {
		t.Fatalf("the joined node %s never turned Ready: %v\n%s", n.Name, err, n.Logs(20))
	}
	requireAgentsReady(t, env.fleet.Nodes)
	for _, f := range []string{n.PrimaryConfig, ownedPath(n)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("joined node %s: %v", n.Name, err)
		}
	}
	meshed := startPod(t, n, cluster.PodSpec{Namespace: "default", Name: "joined-meshed", Target: target, Sidecar: true, NodeName: n.Name})
	plain := startPod(t, n, cluster.PodSpec{Namespace: "default", Name: "joined-plain", Target: target, NodeName: n.Name})
	requireFirstAttempt(t, n, meshed)
	if err := rulesMatchModel(t.Context(), n, "joined-meshed"); err != nil {
		t.Error(err)
	}
	poll.Until(t, 30*time.Second, "the joined node's meshed app through its proxy", func() (bool, string) {
		log := n.ContainerLog(meshed, "app")
		return strings.Contains(log, "proxy listener=outbound orig="+target), log
	})
	poll.Until(t, 30*time.Second, "the joined node's plain app straight to the server on another node", func() (bool, string) {
		log := n.ContainerLog(plain, "app")
		return strings.Contains(log, "server name=server"), log
	})
}

// TestFlannelRestartedAndRolled: while meshed pods keep starting on every
// node, Flannel's pods are restarted on every node at once (each one's init
// container rewrites 10-flannel.conflist, unchanged), then its DaemonSet
// is rolled to a new image
// whose CNI config says cniVersion 0.4.0: on every node istio-cni's
// conflist follows Flannel's new one, never goes missing, and every pod
// that started meanwhile did so at its first attempt with its rules
// (meshedDuring). How long each node's follow took is logged; the
// figures live in BENCHMARKS.md.
func TestFlannelRestartedAndRolled(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	const next = cluster.FlannelImage + "-next"
	for _, n := range env.fleet.Nodes {
		if err := n.TagImage(t.Context(), cluster.FlannelImage, next); err != nil {
			t.Fatal(err)
		}
	}
	stopWatch := watchFiles(t, env.fleet.Nodes)
	follow := watchFollow(t, env.fleet.Nodes, `"cniVersion": "0.4.0"`)
	meshedDuring(t, "flannel-roll", func() {
		// Restarted on every node at once, as after a crash or an eviction.
		var old []string
		for _, p := range flannelPods(t) {
			old = append(old, p.Metadata.UID)
		}
		kubectl(t, "-n", "kube-flannel", "delete", "pods", "-l", "app=flannel", "--wait=false")
		poll.Until(t, 3*time.Minute, "a new Flannel pod Ready on every node", func() (bool, string) {
			ready := 0
			for _, p := range flannelPods(t) {
				if !slices.Contains(old, p.Metadata.UID) && allReady(p) {
					ready++
				}
			}
			return ready == len(env.fleet.Nodes), fmt.Sprintf("%d of %d", ready, len(env.fleet.Nodes))
		})
		conf := kubectl(t, "-n", "kube-flannel", "get", "configmap", "kube-flannel-cfg", "-o", "jsonpath={.data.cni-conf\\.json}")
		if !strings.Contains(conf, `"cniVersion": "0.3.1"`) {
			t.Fatalf("Flannel's cni-conf.json says no cniVersion 0.3.1:\n%s", conf)
		}
		patch, err := json.Marshal(map[string]any{"data": map[string]string{"cni-conf.json": strings.Replace(conf, `"cniVersion": "0.3.1"`, `"cniVersion": "0.4.0"`, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		kubectl(t, "-n", "kube-flannel", "patch", "configmap", "kube-flannel-cfg", "--type=merge", "-p", string(patch))
		kubectl(t, "-n", "kube-flannel", "set", "image", "daemonset/kube-flannel-ds",
			"install-cni-plugin="+next, "install-cni="+next, "kube-flannel="+next)
		kubectl(t, "-n", "kube-flannel", "rollout", "status", "daemonset/kube-flannel-ds", "--timeout=5m")
		poll.Until(t, time.Minute, "istio-cni's conflist following Flannel's 0.4.0 on every node", func() (bool, string) {
			lags := follow()
			return len(lags) == len(env.fleet.Nodes), fmt.Sprint("followed: ", lags)
		})
	})
	if gaps := stopWatch(); len(gaps) > 0 {
		t.Errorf("istio-cni's files went missing while Flannel rolled: %v", gaps)
	}
	t.Logf("Flannel's new conflist → istio-cni's following it, by node: %v", follow())
}

// flannelPods are Flannel's pods not being deleted.
func flannelPods(t *testing.T) []cluster.Pod {
	t.Helper()
	var list struct{ Items []cluster.Pod }
	if err := json.Unmarshal([]byte(kubectl(t, "-n", "kube-flannel", "get", "pods", "-l", "app=flannel", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(list.Items, func(p cluster.Pod) bool { return p.Metadata.DeletionTimestamp != nil })
}

// watchFollow polls each node's primary and istio-cni's conflist every
// 5 ms until the test ends; the returned function gives, per node whose
// primary came to hold want and whose owned conflist then held it too,
// the time from the one's write to the other's (their mtimes: the
// kernel's clock, not the poll's).
func watchFollow(t *testing.T, nodes []*cluster.Node, want string) func() map[string]time.Duration {
	var mu sync.Mutex
	primaryAt, ownedAt := map[string]time.Time{}, map[string]time.Time{}
	// writtenAt is path's mtime if it holds want.
	writtenAt := func(path string) (time.Time, bool) {
		f, err := os.Open(path) // #nosec G304 -- the node's CNI configs
		if err != nil {
			return time.Time{}, false
		}
		defer f.Close()
		st, err := f.Stat() // the file read, whatever replaces it meanwhile
		if err != nil {
			return time.Time{}, false
		}
		b, err := io.ReadAll(f)
		return st.ModTime(), err == nil && strings.Contains(string(b), want)
	}
	stop := poll.Every(5*time.Millisecond, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range nodes {
			for path, seen := range map[string]map[string]time.Time{n.PrimaryConfig: primaryAt, ownedPath(n): ownedAt} {
				if _, ok := seen[n.Name]; !ok {
					if at, ok := writtenAt(path); ok {
						seen[n.Name] = at
					}
				}
			}
		}
	})
	t.Cleanup(stop)
	return func() map[string]time.Duration {
		mu.Lock()
		defer mu.Unlock()
		lags := map[string]time.Duration{}
		for name, p := range primaryAt {
			if o, ok := ownedAt[name]; ok {
				lags[name] = o.Sub(p).Round(100 * time.Microsecond)
			}
		}
		return lags
	}
}
