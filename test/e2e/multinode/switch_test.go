package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// The fleet's switch, as docs/migration.md's "Node by node" runs it: a
// node label that the two DaemonSets' node affinities read moves the
// nodes from one installer to the other one at a time, each checked
// before the next.
const (
	switchNamespace = "switch" // injection-enabled
	switchLabel     = "istio-cni-switch"
	upstreamNS      = cluster.IstioNamespace
	// Both charts' release and DaemonSet names.
	releaseName = "istio-cni"
	daemonSet   = "istio-cni-node"
)

// TestSwitchFromUpstreamNodeByNode: upstream istio-cni, installed by its
// own chart with its default values, runs on every node with injected
// pods; this project is installed beside it node by node (each node
// checked: its agent ready, its Event saying both run, inspect reading the
// node's running pod as redirected), then upstream removed; and back the
// same way, upstream chaining into Flannel's own file. Injected pods
// stream on every node throughout, each starting at its first sandbox
// with istio-validation passing at its first attempt and the rule model
// in its namespace. One pod per node started before the switch, and one
// started after it (watched through the way back), keep exactly the model
// (read every 500 ms), their sandbox and containers, and their traffic
// through their proxy; every node stays Ready and untainted. After each
// switch nothing of the other side is left on any node; after the switch
// back upstream runs only where the label allows, and is ready on every
// node (its /readyz and its own gauge).
func TestSwitchFromUpstreamNodeByNode(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	fleetIstio(t)
	overlay := filepath.Join(env.dir, "overlay")
	restored := false
	t.Cleanup(func() {
		if !restored {
			restoreSuiteInstall(overlay)
		}
	})

	// Start as upstream's users are: its istio-cni alone on every node.
	kubectl(t, "delete", "-k", overlay, "--wait=false")
	waitNodes(t, "this project's files gone", ourFilesOn)
	poll.Until(t, 3*time.Minute, "the istio-cni namespace gone", func() (bool, string) {
		out, err := env.fleet.Kubectl(t.Context(), "get", "namespace", "istio-cni", "--ignore-not-found", "-o", "name")
		return err == nil && out == "", out
	})
	installUpstream(t)
	w := watchInjected(t, "before")

	// To this project, node by node: its DaemonSet keeps off nodes still
	// labelled upstream, and each label removed lets it on one more.
	kubectl(t, "label", "nodes", "--all", switchLabel+"=upstream")
	injectedDuring(t, "to-ours", func() {
		installOurs(t, notOn(t, "upstream"))
		for i, n := range env.fleet.Nodes {
			start := time.Now()
			kubectl(t, "label", "node", n.Name, switchLabel+"-")
			requireAgentsReady(t, env.fleet.Nodes[:i+1])
			poll.Until(t, time.Minute, "an "+nodeagent.ReasonOtherInstaller+" Event on node "+n.Name, func() (bool, string) {
				return otherInstallerEvent(t.Context(), n.Name)
			})
			// The runtime now reads this project's config there; upstream's
			// rules in the node's running pod read as they should be.
			out, code := inspectOn(t, n, switchNamespace+"/"+w.pods[i].name)
			if code != 0 || !strings.Contains(out, "verdict:   ok: redirected") || !strings.Contains(out, filepath.Base(ownedPath(n))+" (the runtime's config) chains istio-cni") {
				t.Errorf("inspect of %s's running pod beside upstream (exit %d):\n%s", n.Name, code, out)
			}
			t.Logf("node %s: this project ready beside upstream's in %s", n.Name, time.Since(start).Round(100*time.Millisecond))
		}
		start := time.Now()
		removeDaemonSetFirst(t, upstreamNS, "upstream's files gone", upstreamFilesOn)
		t.Logf("upstream's removed, its files gone from every node, in %s", time.Since(start).Round(100*time.Millisecond))
	})
	for _, n := range env.fleet.Nodes {
		if _, err := os.Stat(ownedPath(n)); err != nil {
			t.Errorf("node %s after the switch: %v", n.Name, err)
		}
	}
	w.check(t)
	// Pods started under this project alone are watched through the way
	// back, with those from before.
	after := watchInjected(t, "after-to-ours")

	// Back, node by node: upstream keeps off nodes labelled sidecar, and
	// chains into Flannel's own file, which the runtime reads once this
	// project's copy of it is gone.
	kubectl(t, "label", "nodes", "--all", switchLabel+"=sidecar")
	injectedDuring(t, "to-upstream", func() {
		installUpstream(t, "-f", notOn(t, "sidecar"), "--set", "cniConfFileName="+cluster.FlannelConflist)
		requireUpstreamOn(t, nil)
		for i, n := range env.fleet.Nodes {
			start := time.Now()
			kubectl(t, "label", "node", n.Name, switchLabel+"-")
			poll.Until(t, 2*time.Minute, "upstream's istio-cni ready on node "+n.Name, func() (bool, string) {
				return upstreamReadyOn(t.Context(), n)
			})
			requireUpstreamOn(t, env.fleet.Nodes[:i+1])
			t.Logf("node %s: upstream's ready beside this project in %s", n.Name, time.Since(start).Round(100*time.Millisecond))
		}
		start := time.Now()
		removeDaemonSetFirst(t, "istio-cni", "this project's files gone", ourFilesOn)
		t.Logf("this project removed, its files gone from every node, in %s", time.Since(start).Round(100*time.Millisecond))
	})
	for _, n := range env.fleet.Nodes {
		if ok, why := upstreamReadyOn(t.Context(), n); !ok {
			t.Errorf("upstream's istio-cni on node %s after the switch back: %s", n.Name, why)
		}
	}
	startInjected(t, "after-to-upstream")
	w.check(t)
	after.check(t)

	// Back to the suite's own install.
	removeDaemonSetFirst(t, upstreamNS, "upstream's files gone", upstreamFilesOn)
	if err := removeUpstreamLogs(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.fleet.Install(t.Context(), overlay, true); err != nil {
		t.Fatal(err)
	}
	restored = true
}

// fleetIstio installs Istio's control plane for the fleet, with the
// proxy's and upstream istio-cni's images on every node, and an
// injection-enabled namespace; all go when the test ends.
func fleetIstio(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	if err := cluster.MakeIstioBinaries(ctx); err != nil {
		t.Fatal(err)
	}
	proxy, err := cluster.ProxyImageArchive(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := cluster.MakeUpstreamCNIImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range env.fleet.Nodes {
		if err := n.ImportImages(ctx, proxy, upstream); err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
	}
	istio, err := env.fleet.InstallIstio(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := istio.Uninstall(context.Background()); err != nil {
			t.Error(err)
		}
	})
	kubectl(t, "create", "namespace", switchNamespace)
	t.Cleanup(func() {
		_, _ = env.fleet.Kubectl(context.Background(), "delete", "namespace", switchNamespace, "--wait=false")
	})
	kubectl(t, "label", "namespace", switchNamespace, "istio-injection=enabled")
	if err := env.fleet.IstioNamespaceReady(ctx, switchNamespace); err != nil {
		t.Fatal(err)
	}
}

// restoreSuiteInstall, after a failed switch: both releases removed,
// DaemonSet first, the labels off, the suite's own install back.
func restoreSuiteInstall(overlay string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ns := range []string{upstreamNS, "istio-cni"} {
		_, _ = env.fleet.Kubectl(ctx, "-n", ns, "delete", "daemonset", daemonSet, "--ignore-not-found", "--wait=false")
	}
	// As the runbook does: the agents' shutdown done, with their
	// credentials, before Helm takes them.
	_ = poll.Wait(2*time.Minute, "both installers' files gone", func() (bool, string) {
		var left []string
		for _, n := range env.fleet.Nodes {
			left = append(append(left, upstreamFilesOn(n)...), ourFilesOn(n)...)
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	for _, ns := range []string{upstreamNS, "istio-cni"} {
		_ = helm(ctx, "uninstall", releaseName, "--namespace", ns, "--wait", "--ignore-not-found")
	}
	_, _ = env.fleet.Kubectl(ctx, "label", "nodes", "--all", switchLabel+"-")
	_ = removeUpstreamLogs()
	// kubectl delete -k's namespace must be gone first; Helm's stays.
	_ = poll.Wait(3*time.Minute, "the istio-cni namespace gone or active", func() (bool, string) {
		out, err := env.fleet.Kubectl(ctx, "get", "namespace", "istio-cni", "--ignore-not-found", "-o", "jsonpath={.status.phase}")
		return err == nil && strings.TrimSpace(out) != "Terminating", out
	})
	if _, err := env.fleet.Install(ctx, overlay, true); err != nil {
		fmt.Fprintln(os.Stderr, "multinode: reinstalling after the switch:", err)
	}
}

// notOn writes a values file, for either chart, whose required node
// affinity keeps the DaemonSet off nodes labelled switchLabel=value.
func notOn(t *testing.T, value string) string {
	t.Helper()
	term := map[string]any{"matchExpressions": []any{map[string]any{"key": switchLabel, "operator": "NotIn", "values": []string{value}}}}
	b, err := json.Marshal(map[string]any{"affinity": map[string]any{"nodeAffinity": map[string]any{
		"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{term}}}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "not-on-"+value+".json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// apiSets point a chart's agent at the fleet's API server: the nodes have
// no Service network.
func apiSets() []string {
	api := env.fleet.APIAddr()
	return []string{"--set", "env.KUBERNETES_SERVICE_HOST=" + api.Addr().String(), "--set", fmt.Sprintf("env.KUBERNETES_SERVICE_PORT=%d", api.Port())}
}

// installUpstream is `helm install istio-cni <istio/cni> -n istio-system`
// with the chart's default values but for its image (built here) and the
// API's address, and args (-f, --set); it waits for the rollout.
func installUpstream(t *testing.T, args ...string) {
	t.Helper()
	manifests, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"install", releaseName, filepath.Join(manifests, "charts", "istio-cni"), "--namespace", upstreamNS, "--wait", "--timeout", "3m",
		"--set", "global.hub=" + cluster.IstioHub, "--set", "global.tag=" + cluster.IstioTag}
	all = append(append(all, apiSets()...), args...)
	if err := helm(t.Context(), all...); err != nil {
		t.Fatal(err)
	}
}

// installOurs installs this project as docs/migration.md says: upstream's
// values file, istioOwnedCNIConfig back to true, and affinity (a values
// file) keeping it off the nodes not switched yet.
func installOurs(t *testing.T, affinity string) {
	t.Helper()
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := cluster.IstioManifests()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"install", releaseName, filepath.Join(base, "helm", "istio-cni"), "--namespace", "istio-cni", "--create-namespace",
		"--wait", "--timeout", "3m", "-f", filepath.Join(manifests, "charts", "istio-cni", "values.yaml"), "-f", affinity,
		"--set", "istioOwnedCNIConfig=true", "--set", "global.hub=localhost/istio-cni", "--set", "global.tag=0.1.0"}
	if err := helm(t.Context(), append(args, apiSets()...)...); err != nil {
		t.Fatal(err)
	}
}

func helm(ctx context.Context, args ...string) error {
	bin, err := cluster.Helm()
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", env.fleet.Kubeconfig}, args...)...).CombinedOutput() // #nosec G204 -- test harness
	if err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// removeDaemonSetFirst removes the release in ns as docs/migration.md
// says: its DaemonSet, then, once left (its agents' shutdown done while
// their credentials still work) says no node has anything left, the rest
// with Helm.
func removeDaemonSetFirst(t *testing.T, ns, what string, left func(*cluster.Node) []string) {
	t.Helper()
	kubectl(t, "-n", ns, "delete", "daemonset", daemonSet, "--wait=false")
	waitNodes(t, what, left)
	if err := helm(t.Context(), "uninstall", releaseName, "--namespace", ns, "--wait"); err != nil {
		t.Fatal(err)
	}
}

// waitNodes waits until left lists nothing on any node.
func waitNodes(t *testing.T, what string, left func(*cluster.Node) []string) {
	t.Helper()
	poll.Until(t, 2*time.Minute, what, func() (bool, string) {
		var all []string
		for _, n := range env.fleet.Nodes {
			all = append(all, left(n)...)
		}
		return len(all) == 0, strings.Join(all, ", ")
	})
}

// upstreamLogs are what upstream's installer leaves in the run directory
// when it goes (constants.LocalRollingLogName and LogUDSSocketName in the
// pinned module): its plugin's log and the socket its agent read it from.
// This project's are under log/.
var upstreamLogs = []string{"istio-cni.log", "log.sock"}

// removeUpstreamLogs takes upstream's leftovers off every node, for the
// suite's later checks that nothing is left in the run directory.
func removeUpstreamLogs() error {
	var errs []error
	for _, n := range env.fleet.Nodes {
		for _, f := range upstreamLogs {
			if err := os.Remove(filepath.Join(n.IstioRunDir, f)); err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// upstreamFilesOn lists what of upstream's install is on node n and its
// shutdown takes: its binary, its kubeconfig, its entry in any config.
func upstreamFilesOn(n *cluster.Node) []string {
	var left []string
	for _, p := range []string{filepath.Join(n.CNIBinDir, "istio-cni"), filepath.Join(n.IstioRunDir, "istio-cni-kubeconfig")} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, n.Name+":"+p)
		}
	}
	cd, _ := install.ReadConfDir(n.CNINetDir)
	for _, f := range cd.Files {
		if chain.UpstreamEntry(f.Data) {
			left = append(left, n.Name+": upstream's entry in "+f.Name)
		}
	}
	return left
}

// ourFilesOn is leftOn without upstream's files, which share the run
// directory.
func ourFilesOn(n *cluster.Node) []string {
	theirs := upstreamFilesOn(n)
	for _, f := range upstreamLogs {
		theirs = append(theirs, n.Name+":"+filepath.Join(n.IstioRunDir, f))
	}
	var left []string
	for _, p := range leftOn(n) {
		if !slices.Contains(theirs, n.Name+":"+p) {
			left = append(left, n.Name+":"+p)
		}
	}
	return left
}

// podsByNode lists the pods in ns that selector selects, not being
// deleted, by their node.
func podsByNode(ctx context.Context, ns, selector string) (map[string]cluster.Pod, error) {
	status, body, err := env.fleet.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods?labelSelector="+url.QueryEscape(selector), nil)
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("listing pods %s in %s: %d %s %v", selector, ns, status, body, err)
	}
	var list struct{ Items []cluster.Pod }
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	byNode := map[string]cluster.Pod{}
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			byNode[p.Spec.NodeName] = p
		}
	}
	return byNode, nil
}

// upstreamReadyOn: upstream's installer on node n says it is ready
// (cluster.UpstreamCNIReady).
func upstreamReadyOn(ctx context.Context, n *cluster.Node) (bool, string) {
	pods, err := podsByNode(ctx, upstreamNS, "k8s-app=istio-cni-node")
	if err != nil {
		return false, err.Error()
	}
	p, ok := pods[n.Name]
	if !ok || p.Status.PodIP == "" {
		return false, "no running pod of upstream's on the node"
	}
	return cluster.UpstreamCNIReady(ctx, p.Status.PodIP)
}

// requireUpstreamOn: upstream's DaemonSet has pods on exactly nodes (its
// affinity keeps it off the others).
func requireUpstreamOn(t *testing.T, nodes []*cluster.Node) {
	t.Helper()
	pods, err := podsByNode(t.Context(), upstreamNS, "k8s-app=istio-cni-node")
	if err != nil {
		t.Fatal(err)
	}
	var want, have []string
	for _, n := range nodes {
		want = append(want, n.Name)
	}
	for name := range pods {
		have = append(have, name)
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Fatalf("upstream's istio-cni runs on %v; want %v", have, want)
	}
}

// otherInstallerEvent: the agent on node has recorded that another
// installer runs there (docs/migration.md's check).
func otherInstallerEvent(ctx context.Context, node string) (bool, string) {
	sel := url.QueryEscape("reason=" + nodeagent.ReasonOtherInstaller + ",involvedObject.name=" + node)
	status, body, err := env.fleet.Do(ctx, http.MethodGet, "/api/v1/events?fieldSelector="+sel, nil)
	if err != nil || status != http.StatusOK {
		return false, fmt.Sprintf("%d %v", status, err)
	}
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(body, &list); err != nil {
		return false, err.Error()
	}
	return len(list.Items) > 0, fmt.Sprintf("%d Events", len(list.Items))
}

// injectedSpec is a pod the injector makes meshed: an app only, in the
// injection-enabled namespace, bound to n, dialing the suite's server.
func injectedSpec(target, name string, n *cluster.Node) cluster.PodSpec {
	return cluster.PodSpec{Namespace: switchNamespace, Name: name, Target: target, NodeName: n.Name}
}

// validationInit is the injector's first init container in CNI mode.
const validationInit = "istio-validation"

// injectedDuring is meshedDuring's stream with injected pods.
func injectedDuring(t *testing.T, prefix string, op func()) {
	t.Helper()
	target := serverAddr(t)
	streamDuring(t, prefix, func(name string, n *cluster.Node) cluster.PodSpec { return injectedSpec(target, name, n) },
		func(ctx context.Context, n *cluster.Node, name string) error {
			wctx, cancel := context.WithTimeout(ctx, podTimeout)
			p, err := n.WaitRunning(wctx, switchNamespace, name)
			cancel()
			if err != nil {
				return fmt.Errorf("node %s: %s: %w\n%s", n.Name, name, err, n.PodEvents(ctx, switchNamespace, name))
			}
			_, err = injectedStarted(ctx, n, p)
			return err
		}, op)
}

// injectedStarted checks the running injected pod p on n started well: no
// failed sandbox, its first sandbox the one running, istio-validation
// first and passed at its first attempt, and its namespace holding the
// rule model the decision gives for the pod as the API has it (the
// injector's annotations; IPv4) in one iptables backend and none of
// istio-cni's in the other. It returns that check and the backend's
// iptables-save, for later reads.
func injectedStarted(ctx context.Context, n *cluster.Node, p cluster.Pod) (heldRules, error) {
	ns, name := p.Metadata.Namespace, p.Metadata.Name
	where := fmt.Sprintf("node %s: %s/%s", n.Name, ns, name)
	events := n.PodEvents(ctx, ns, name)
	if strings.Contains(events, "FailedCreatePodSandBox") {
		return heldRules{}, fmt.Errorf("%s: a sandbox failed before it ran: %s", where, events)
	}
	inits := p.Spec.InitContainers
	if len(inits) == 0 || inits[0].Name != validationInit {
		return heldRules{}, fmt.Errorf("%s: want %s as first init container, have %+v", where, validationInit, inits)
	}
	found := false
	for _, c := range p.Status.InitContainerStatuses {
		if c.Name != inits[0].Name {
			continue
		}
		found = true
		if c.ExitCode() != 0 || c.RestartCount != 0 {
			return heldRules{}, fmt.Errorf("%s: %s exit %d after %d restarts, want 0 at its first attempt\n%s", where, c.Name, c.ExitCode(), c.RestartCount, events)
		}
	}
	if !found {
		return heldRules{}, fmt.Errorf("%s: no status for %s: %+v", where, inits[0].Name, p.Status.InitContainerStatuses)
	}
	if attempts, err := n.SandboxAttempts(ctx, p.Metadata.UID); err != nil || !slices.Equal(attempts, []uint32{0}) {
		return heldRules{}, fmt.Errorf("%s: sandbox attempts %v (%v), want only the first\n%s", where, attempts, err, events)
	}
	program, save, err := heldIn(ctx, n, ns, name)
	if err != nil {
		return heldRules{}, fmt.Errorf("%s: %w", where, err)
	}
	held, err := rulesHeld(ctx, ns, name)
	if err == nil {
		err = held(save)
	}
	if err != nil {
		return heldRules{}, fmt.Errorf("%s: %s: %w", where, program, err)
	}
	return heldRules{save: program, match: held}, nil
}

// heldRules is what a pod's namespace must hold from its start on: match
// reads the output of save, the iptables-save of the backend holding its
// rules.
type heldRules struct {
	save  string
	match func(save string) error
}

// heldIn reads the pod's namespace with each backend's iptables-save and
// returns the one holding istio-cni's chains, with its output: on a
// legacy node this project writes with the node's iptables, legacy, while
// upstream's plugin detects in the pod's fresh namespace and picks nft
// wherever iptables-nft exists. Chains in both backends, or in neither,
// is an error.
func heldIn(ctx context.Context, n *cluster.Node, ns, name string) (program, save string, err error) {
	var found []string
	for _, prog := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		out, err := n.SaveIn(ctx, ns, name, prog)
		if err != nil {
			return "", "", err
		}
		if strings.Contains(out, ":ISTIO_") {
			found = append(found, prog)
			program, save = prog, out
		}
	}
	switch len(found) {
	case 0:
		save, _ = n.IptablesSave(ctx, ns, name)
		return "", "", fmt.Errorf("no istio-cni chain in either iptables backend; the node's iptables-save:\n%s", save)
	case 1:
		return program, save, nil
	}
	return "", "", fmt.Errorf("istio-cni's chains in both iptables backends: %v", found)
}

// rulesHeld is what the pod's namespace must hold, given the pod as the
// API has it: the rule model the decision gives (IPv4).
func rulesHeld(ctx context.Context, ns, name string) (func(save string) error, error) {
	status, body, err := env.fleet.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, nil)
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("reading the pod: %d %v", status, err)
	}
	var pod kube.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return nil, err
	}
	d, err := decision.Pod(&pod)
	if err != nil || !d.Redirect {
		return nil, fmt.Errorf("the decision %+v, %v; want redirect", d, err)
	}
	m := decision.Rules(d, decision.DefaultNodeSettings(), true, false)
	return func(save string) error { return matchModel(save, m) }, nil
}

// startInjected starts an injected pod on every node, each checked as
// injectedStarted does and its app's request through its proxy.
func startInjected(t *testing.T, prefix string) {
	t.Helper()
	for _, p := range startedOnEveryNode(t, prefix) {
		requireThroughProxy(t, p.n, p.pod, 0)
	}
}

// startedPod is a pod startedOnEveryNode started, and what its namespace
// must hold from then on.
type startedPod struct {
	n    *cluster.Node
	pod  cluster.Pod
	held heldRules
}

// startedOnEveryNode creates an injected pod on every node at once (named
// prefix-i), deleted when the test ends, and checks each started well
// (injectedStarted).
func startedOnEveryNode(t *testing.T, prefix string) []startedPod {
	t.Helper()
	var specs []cluster.PodSpec
	target := serverAddr(t)
	for i, n := range env.fleet.Nodes {
		s := injectedSpec(target, fmt.Sprintf("%s-%d", prefix, i), n)
		if err := n.CreatePod(t.Context(), s.JSON()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.DeletePod(context.Background(), s.Namespace, s.Name) })
		specs = append(specs, s)
	}
	var started []startedPod
	for i, n := range env.fleet.Nodes {
		ctx, cancel := context.WithTimeout(t.Context(), podTimeout)
		p, err := n.WaitRunning(ctx, switchNamespace, specs[i].Name)
		cancel()
		if err != nil {
			t.Fatalf("node %s: %v\n%s", n.Name, err, n.PodEvents(t.Context(), switchNamespace, specs[i].Name))
		}
		held, err := injectedStarted(t.Context(), n, p)
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, startedPod{n: n, pod: p, held: held})
	}
	return started
}

// requireThroughProxy: the app's log, from byte from on, shows a request
// through its proxy; and the whole log none that reached the server past
// it.
func requireThroughProxy(t *testing.T, n *cluster.Node, p cluster.Pod, from int) {
	t.Helper()
	want := "proxy listener=outbound orig=" + serverAddr(t)
	poll.Until(t, 30*time.Second, n.Name+": "+p.Metadata.Name+"'s request through its proxy", func() (bool, string) {
		log := n.ContainerLog(p, "app")
		return len(log) > from && strings.Contains(log[from:], want), log
	})
	if log := n.ContainerLog(p, "app"); strings.Contains(log, "server name=") {
		t.Errorf("node %s: a request of %s reached the server past its proxy:\n%s", n.Name, p.Metadata.Name, log)
	}
}

// injectedWatch holds one injected pod per node, started before the
// switch, and reads each one's rules every 500 ms.
type injectedWatch struct {
	pods []watchedInjected
	stop func()
	// Only check's: the app logs' lengths and the reads at the last check.
	logMarks      []int
	checkedRounds int

	mu       sync.Mutex
	rounds   int
	failures []string
}

type watchedInjected struct {
	n           *cluster.Node
	name, netns string
	held        heldRules
	restarts    int
}

// watchInjected starts one injected pod per node (named prefix-i), checks
// each started well and goes through its proxy, and starts the reads.
func watchInjected(t *testing.T, prefix string) *injectedWatch {
	t.Helper()
	w := &injectedWatch{}
	for _, s := range startedOnEveryNode(t, prefix) {
		n, p, held, name := s.n, s.pod, s.held, s.pod.Metadata.Name
		requireThroughProxy(t, n, p, 0)
		netns, err := n.PodNetNS(t.Context(), switchNamespace, name)
		if err != nil {
			t.Fatal(err)
		}
		w.pods = append(w.pods, watchedInjected{n: n, name: name, netns: netns, held: held, restarts: restarts(p)})
		w.logMarks = append(w.logMarks, len(n.ContainerLog(p, "app")))
	}
	w.stop = poll.Paced(500*time.Millisecond, w.round)
	t.Cleanup(w.stop)
	return w
}

func restarts(p cluster.Pod) int {
	n := 0
	for _, c := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		n += c.RestartCount
	}
	return n
}

// round reads every watched pod's rules as an operator would (nsenter,
// the iptables-save of the backend that held them at its start) and notes any read that is not exactly the model, and
// any node that is not Ready or carries the startup taint.
func (w *injectedWatch) round() {
	var bad []string
	for _, p := range w.pods {
		// This machine's programs: a node's are the same files.
		out, err := exec.Command("nsenter", "--net="+p.netns, p.held.save).CombinedOutput() // #nosec G204 -- test harness
		if err == nil {
			err = p.held.match(string(out))
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s on %s: %v", p.name, p.n.Name, err))
		}
	}
	bad = append(bad, nodesUnschedulable()...)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rounds++
	for _, b := range bad {
		if len(w.failures) < 10 {
			w.failures = append(w.failures, fmt.Sprintf("round %d: %s", w.rounds, b))
		}
	}
}

// nodesUnschedulable lists the nodes that are not Ready or carry the
// startup taint (either installer's agent, or istiod's untaint
// controller, may hold it): a switch must keep every node taking pods.
func nodesUnschedulable() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	status, body, err := env.fleet.Do(ctx, http.MethodGet, "/api/v1/nodes", nil)
	if err != nil || status != http.StatusOK {
		return []string{fmt.Sprintf("listing nodes: %d %v", status, err)}
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ Taints []struct{ Key string } }
			Status   struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for _, n := range list.Items {
		for _, tn := range n.Spec.Taints {
			if tn.Key == taint.DefaultKey {
				bad = append(bad, "node "+n.Metadata.Name+" has the taint "+taint.DefaultKey)
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status != "True" {
				bad = append(bad, "node "+n.Metadata.Name+" is not Ready")
			}
		}
	}
	return bad
}

// check: every read so far held the model and found every node Ready and
// untainted; each pod still runs in its
// first sandbox with no container restarted, and its requests since the
// last check went through its proxy.
func (w *injectedWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	rounds, failures := w.rounds, w.failures
	w.failures = nil // each check reports what came since the last
	w.mu.Unlock()
	t.Logf("%d reads of %d running pods' rules so far", rounds, len(w.pods))
	if rounds <= w.checkedRounds {
		t.Errorf("the running pods' rules were not read since the last check (%d reads)", rounds)
	}
	w.checkedRounds = rounds
	for _, f := range failures {
		t.Error("during the switch: " + f)
	}
	for i := range w.pods {
		p := &w.pods[i]
		now, found, err := p.n.GetPod(t.Context(), switchNamespace, p.name)
		if err != nil || !found {
			t.Fatalf("%s on %s: %v (found %v)", p.name, p.n.Name, err, found)
		}
		if attempts, err := p.n.SandboxAttempts(t.Context(), now.Metadata.UID); err != nil || !slices.Equal(attempts, []uint32{0}) {
			t.Errorf("%s on %s: sandbox attempts %v (%v), want only the first", p.name, p.n.Name, attempts, err)
		}
		if r := restarts(now); r != p.restarts {
			t.Errorf("%s on %s: %d container restarts, %d before", p.name, p.n.Name, r, p.restarts)
		}
		requireThroughProxy(t, p.n, now, w.logMarks[i])
		w.logMarks[i] = len(p.n.ContainerLog(now, "app"))
	}
}
