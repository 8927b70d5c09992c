package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// nodeWithoutPrimary is what a node showed once istio-cni's agent had
// installed itself there, before any primary CNI.
type nodeWithoutPrimary struct {
	netd      []string // the files in its /etc/cni/net.d
	readyz    string   // the agent's /readyz answer
	nodeReady bool
}

// waitingForPrimary is how the agent's /readyz says it waits for one.
const waitingForPrimary = "no valid primary CNI config"

// waitAgentsWithoutPrimary waits until every node's agent says, on its
// /readyz, that it waits for a primary CNI (it has run its install pass),
// records what each node shows, then creates a meshed pod bound to each
// node (kubelet holds it until the node's network is ready), for
// TestIstioCNIBeforeFlannel.
func waitAgentsWithoutPrimary(ctx context.Context, fleet *cluster.Fleet) (map[string]nodeWithoutPrimary, error) {
	seen := map[string]nodeWithoutPrimary{}
	for _, n := range fleet.Nodes {
		var s nodeWithoutPrimary
		url := fmt.Sprintf("http://%s/readyz", netip.AddrPortFrom(n.NodeIP, agentHealthPort))
		err := poll.Wait(3*time.Minute, "node "+n.Name+"'s agent waiting for a primary CNI", func() (bool, string) {
			status, body, err := cluster.HTTPGet(ctx, url)
			if err != nil {
				return false, err.Error()
			}
			s.readyz = fmt.Sprintf("%d %s", status, body)
			return status != http.StatusOK && strings.Contains(body, waitingForPrimary), s.readyz
		})
		if err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(n.CNINetDir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			s.netd = append(s.netd, e.Name())
		}
		if s.nodeReady, _, err = n.NodeReady(ctx); err != nil {
			return nil, err
		}
		seen[n.Name] = s
	}
	for _, n := range fleet.Nodes {
		spec := cluster.PodSpec{Namespace: "default", Name: beforeFlannelPod(n), Target: "127.0.0.1:9", Sidecar: true, NodeName: n.Name} // its rules are checked, not its traffic
		if err := n.CreatePod(ctx, spec.JSON()); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// agentHealthPort is the agent's /readyz port on its node (hostNetwork).
const agentHealthPort = 8000

// beforeFlannelPod is the meshed pod made on n before Flannel.
func beforeFlannelPod(n *cluster.Node) string {
	return "before-flannel-" + strings.TrimPrefix(n.Name, "istio-cni-fleet-")
}

// TestIstioCNIBeforeFlannel: installed before the primary (the fleet's
// bring-up), istio-cni's agent installs the plugin and then, while the
// node has no primary, writes no config of its own and says on /readyz
// that it waits for one; the node stays NotReady. A meshed pod bound to
// each node meanwhile waits with it. Once Flannel writes its conflist,
// istio-cni's chains after it (Flannel's cniVersion, name and plugins,
// then istio-cni), and each waiting pod starts at its first sandbox
// attempt with exactly the rule model, in the node's Flannel lease; so
// does a meshed pod made afterwards, which inspect, run on its node,
// reads as redirected.
func TestIstioCNIBeforeFlannel(t *testing.T) {
	for _, n := range env.fleet.Nodes {
		before, ok := env.beforeFlannel[n.Name]
		switch {
		case !ok:
			t.Errorf("node %s: nothing recorded before Flannel", n.Name)
		case len(before.netd) != 0 || before.nodeReady || !strings.Contains(before.readyz, waitingForPrimary):
			t.Errorf("node %s before Flannel: /etc/cni/net.d %v (want empty), node Ready %v (want not), the agent's /readyz %q",
				n.Name, before.netd, before.nodeReady, before.readyz)
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
		if owned.CNIVersion != "0.3.1" || owned.Name != "cbr0" || !slices.Equal(types, []string{"flannel", "portmap", chain.PluginType}) {
			t.Errorf("node %s: istio-cni's conflist is %s %s %v; want Flannel's 0.3.1 cbr0 [flannel portmap] then istio-cni:\n%s",
				n.Name, owned.CNIVersion, owned.Name, types, data)
		}
	}
	target := serverAddr(t)
	for _, n := range env.fleet.Nodes {
		waiting := beforeFlannelPod(n)
		t.Cleanup(func() { _ = n.DeletePod(context.Background(), "default", waiting) })
		ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
		p, err := n.WaitRunning(ctx, "default", waiting)
		cancel()
		if err != nil {
			t.Fatalf("node %s: the meshed pod made before Flannel: %v", n.Name, err)
		}
		after := startPod(t, n, cluster.PodSpec{Namespace: "default", Name: "after-flannel-" + strings.TrimPrefix(n.Name, "istio-cni-fleet-"), Target: target, Sidecar: true, NodeName: n.Name})
		// inspect, run on every node, reads them as redirected.
		if out, code := inspectOn(t, n, "default/"+after.Metadata.Name); code != 0 || !strings.Contains(out, "verdict:   ok: redirected") {
			t.Errorf("inspect default/%s on %s (exit %d) says no redirection:\n%s", after.Metadata.Name, n.Name, code, out)
		}
		for _, p := range []cluster.Pod{p, after} {
			requireFirstAttempt(t, n, p)
			if err := rulesMatchModel(t.Context(), n, p.Metadata.Name); err != nil {
				t.Error(err)
			}
			if !n.Subnet.Contains(mustAddr(t, p.Status.PodIP)) {
				t.Errorf("node %s: pod %s has %s, outside the node's Flannel lease %s", n.Name, p.Metadata.Name, p.Status.PodIP, n.Subnet)
			}
		}
	}
}

// TestMeshedAcrossFlannel: between nodes over Flannel's vxlan overlay, in
// each direction, a meshed client's request leaves through its own proxy
// (outbound, original destination the server) and, passed on by it,
// arrives through the meshed server's proxy (inbound, from the client
// pod's own address: no NAT between pods), one exchange crossing both
// pods' rules; a plain client's request reaches the meshed server's
// inbound proxy directly. inspect, run on each node, says the meshed pods
// are redirected and the plain one is not.
func TestMeshedAcrossFlannel(t *testing.T) {
	first, last := env.fleet.Nodes[0], env.fleet.Nodes[len(env.fleet.Nodes)-1]
	for _, dir := range []struct {
		from, to *cluster.Node
		suffix   string
	}{{first, last, "ab"}, {last, first, "ba"}} {
		server := startPod(t, dir.to, cluster.PodSpec{Namespace: "default", Name: "flannel-mserver-" + dir.suffix, Server: true, Sidecar: true, NodeName: dir.to.Name})
		target := fmt.Sprintf("%s:%d", server.Status.PodIP, cluster.ServerPort)
		// Carried by Flannel: nothing else routes one node's pods to another's.
		if out, err := dir.from.Command(t.Context(), "ip", "route", "get", server.Status.PodIP).CombinedOutput(); err != nil || !strings.Contains(string(out), " dev flannel.1 ") {
			t.Errorf("node %s routes %s %s (%v); want through flannel.1, Flannel's vxlan device", dir.from.Name, server.Status.PodIP, out, err)
		}
		client := startPod(t, dir.from, cluster.PodSpec{Namespace: "default", Name: "flannel-mclient-" + dir.suffix, Target: target, Sidecar: true, Forward: true, NodeName: dir.from.Name})
		// One reply, two lines in the container's log (each behind the
		// CRI log format's timestamp, stream and tag).
		both := regexp.MustCompile(`proxy listener=outbound orig=` + regexp.QuoteMeta(target) + ` peer=\S+ uid=1337\n\S+ stdout F proxy listener=inbound orig=` +
			regexp.QuoteMeta(target) + ` peer=` + regexp.QuoteMeta(client.Status.PodIP) + `:\d+ uid=1337\n`)
		poll.Until(t, 30*time.Second, dir.from.Name+"'s meshed client through both proxies to "+dir.to.Name, func() (bool, string) {
			log := dir.from.ContainerLog(client, "app")
			return both.MatchString(log), log
		})
		if log := dir.from.ContainerLog(client, "app"); strings.Contains(log, "server name=") {
			t.Errorf("a meshed request reached the meshed server's app past its proxy:\n%s", log)
		}
		for _, c := range []struct {
			n   *cluster.Node
			pod string
		}{{dir.to, server.Metadata.Name}, {dir.from, client.Metadata.Name}} {
			if out, code := inspectOn(t, c.n, "default/"+c.pod); code != 0 || !strings.Contains(out, "verdict:   ok: redirected") {
				t.Errorf("inspect default/%s on %s (exit %d) says no redirection:\n%s", c.pod, c.n.Name, code, out)
			}
		}
	}
	target := ""
	if p, found, err := last.GetPod(t.Context(), "default", "flannel-mserver-ab"); err != nil || !found {
		t.Fatalf("the meshed server: %v (found %v)", err, found)
	} else {
		target = fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)
	}
	plain := startPod(t, first, cluster.PodSpec{Namespace: "default", Name: "flannel-pclient", Target: target, NodeName: first.Name})
	inbound := "proxy listener=inbound orig=" + target + " peer=" + plain.Status.PodIP + ":"
	poll.Until(t, 30*time.Second, "the plain client's request through the meshed server's inbound proxy, from its own address", func() (bool, string) {
		log := first.ContainerLog(plain, "app")
		return strings.Contains(log, inbound) && !strings.Contains(log, "listener=outbound"), log
	})
	if out, code := inspectOn(t, first, "default/flannel-pclient"); code != 0 || !strings.Contains(out, "not redirected: no istio-proxy container") {
		t.Errorf("inspect default/flannel-pclient on %s (exit %d):\n%s", first.Name, code, out)
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
// run, its iptables legacy (its alternatives lead to iptables-legacy; the
// fleet's first nodes are nf_tables; Flannel's image here has only
// iptables-nft, so flanneld's own rules on it are nf_tables' and the
// agent's node-wide guess too, while each pod's record says legacy),
// gets both from their DaemonSets (Flannel's config, then istio-cni's
// chained after it), turns Ready, and starts a meshed pod at its first
// attempt with its rules, in the x_tables its own iptables-save reads and
// none in nf_tables; across the overlay, its meshed app's request goes
// through the proxy and its plain app's reaches the server on another
// node. Once its agent's audit has checked that pod (inspect --node), the
// next meshed pod's ADD is the agent's, written as x_tables replaces, the
// same rules; inspect on the node reads both as redirected; flushed with
// the node's iptables, that pod's rules are put back by the audit. The
// node leaves when the test ends.
func TestNodeJoinsAfterInstall(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	target := serverAddr(t)
	n, err := env.fleet.AddNode(t.Context(), cluster.LegacyIptables, env.images...)
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
	requireLegacyRules(t, n, meshed)
	poll.Until(t, 30*time.Second, "the joined node's meshed app through its proxy", func() (bool, string) {
		log := n.ContainerLog(meshed, "app")
		return strings.Contains(log, "proxy listener=outbound orig="+target), log
	})
	poll.Until(t, 30*time.Second, "the joined node's plain app straight to the server on another node", func() (bool, string) {
		log := n.ContainerLog(plain, "app")
		return strings.Contains(log, "server name=server"), log
	})

	// The agent takes ADDs once its audit has read a meshed pod's rules
	// itself (docs/node-agent.md); the first pod's may be the plugin's.
	poll.Until(t, time.Minute, "the joined node's audit to check its meshed pod", func() (bool, string) {
		out, err := n.Command(t.Context(), env.installCNI, "inspect", "--node", "-o", "json", "--cni-net-dir", "/etc/cni/net.d").Output()
		var doc struct{ Checked *int }
		if json.Unmarshal(out, &doc) != nil || doc.Checked == nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}
		return *doc.Checked >= 1, string(out)
	})
	byAgent := startPod(t, n, cluster.PodSpec{Namespace: "default", Name: "joined-meshed-agent", Target: target, Sidecar: true, NodeName: n.Name})
	requireFirstAttempt(t, n, byAgent)
	// The agent logs the ADD once the shim has its answer: soon after.
	poll.Until(t, 10*time.Second, "the agent's ADD of "+byAgent.Metadata.Name+" in the plugin's log, its rules by x_tables", func() (bool, string) {
		last, ok := cluster.LastADD(pluginLog(n), "default", byAgent.Metadata.Name)
		return ok && last.RanIn == "agent" && last.RulesBy == "x_tables", fmt.Sprintf("%+v (found %v)", last, ok)
	})
	requireLegacyRules(t, n, byAgent)
	poll.Until(t, 30*time.Second, "the agent's meshed pod's app through its proxy", func() (bool, string) {
		log := n.ContainerLog(byAgent, "app")
		return strings.Contains(log, "proxy listener=outbound orig="+target), log
	})

	// Flushed by hand with the node's iptables, the rules are put back by
	// the agent's audit, read and written as x_tables; until then it had
	// found nothing to say of them.
	if events := n.PodEvents(t.Context(), "default", byAgent.Metadata.Name); strings.Contains(events, "IstioRedirect") {
		t.Errorf("the audit acted on %s before its rules were touched: %s", byAgent.Metadata.Name, events)
	}
	netns, err := n.PodNetNS(t.Context(), "default", byAgent.Metadata.Name)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Command(t.Context(), "nsenter", "--net="+netns, "iptables", "-w", "-t", "nat", "-F", "ISTIO_OUTPUT").CombinedOutput(); err != nil {
		t.Fatalf("iptables -t nat -F ISTIO_OUTPUT in %s: %v\n%s", byAgent.Metadata.Name, err, out)
	}
	poll.Until(t, time.Minute, "the joined node's audit to repair the flushed rules", func() (bool, string) {
		events := n.PodEvents(t.Context(), "default", byAgent.Metadata.Name)
		err := rulesMatchModel(t.Context(), n, byAgent.Metadata.Name)
		return err == nil && strings.Contains(events, audit.ReasonRepaired), fmt.Sprintf("%v; events: %s", err, events)
	})
	requireLegacyRules(t, n, byAgent)
}

// requireLegacyRules: the pod's rules are the model as the node's own
// iptables-save (legacy) prints them, nf_tables holds none of them, and
// inspect on the node reads the pod as redirected.
func requireLegacyRules(t *testing.T, n *cluster.Node, p cluster.Pod) {
	t.Helper()
	if err := rulesMatchModel(t.Context(), n, p.Metadata.Name); err != nil {
		t.Error(err)
	}
	if nft, err := n.SaveIn(t.Context(), p.Metadata.Namespace, p.Metadata.Name, "iptables-nft-save"); err != nil || strings.Contains(nft, "ISTIO") {
		t.Errorf("%s on the legacy node %s: iptables-nft-save (%v) shows istio-cni's rules in nf_tables:\n%s", p.Metadata.Name, n.Name, err, nft)
	}
	if out, code := inspectOn(t, n, p.Metadata.Namespace+"/"+p.Metadata.Name); code != 0 || !strings.Contains(out, "verdict:   ok: redirected") {
		t.Errorf("inspect %s on the legacy node %s (exit %d):\n%s", p.Metadata.Name, n.Name, code, out)
	}
}

// TestFlannelRestartedAndRolled: while meshed pods keep starting on every
// node, Flannel's pods are restarted on every node at once (each one's init
// containers rewrite 10-flannel.conflist, unchanged), then its DaemonSet is
// rolled to a new image tag (the same build: only one flanneld release
// builds here) with a CNI config that says cniVersion 0.4.0. On every node
// istio-cni's conflist follows Flannel's new one and never goes missing,
// and every pod started meanwhile runs with its rules, at its first
// attempt or, where Flannel's own plugin copy failed a sandbox, its second
// (flannelsOwnFailure). Each node's follow time is logged (the mtimes of
// the two files).
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
	meshedDuringAllowing(t, "flannel-roll", flannelsOwnFailure, func() {
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

// flannelsOwnFailure: the pod's one failed sandbox failed for Flannel's
// own reason, none istio-cni's: Flannel's init container copies its plugin
// into /opt/cni/bin with a plain cp -f, as Flannel's manifest does, so a
// sandbox set up during the copy finds the binary busy, half-written or
// gone. The issue allows a pod that one retry. Any other failure (one of
// istio-cni's, or of the chain istio-cni wrote) is not excused.
func flannelsOwnFailure(events string) bool {
	failed := 0
	for _, line := range strings.Split(events, "\n") {
		if !strings.Contains(line, "FailedCreatePodSandBox") {
			continue
		}
		if !flannelCopyRace.MatchString(line) {
			return false
		}
		failed++
	}
	return failed == 1
}

// flannelCopyRace is how a sandbox fails while the flannel plugin's
// binary is being copied into place.
var flannelCopyRace = regexp.MustCompile(`plugin type="flannel" failed \(add\): (fork/exec \S*/flannel: (text file busy|exec format error)|failed to find plugin "flannel")`)

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
