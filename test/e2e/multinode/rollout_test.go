package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// ownedPath is a node's conflist istio-cni writes.
func ownedPath(n *cluster.Node) string { return filepath.Join(n.CNINetDir, "02-istio-cni.conflist") }

// TestRollbackAndUpgradeAcrossNodes: the DaemonSet rolled back to the
// previous build's image (cluster.PreviousBuild) and upgraded to this
// build's again, as an operator does it (kubectl set image), on the mixed
// fleet, its last node legacy. Each rollout replaces the agents one node
// at a time (maxUnavailable: 1) while meshed pods keep starting on every
// node, each at its first attempt and redirected, and no node's files go
// missing. Between the two, this build's shim and kubeconfig, which the
// previous build does not name, are removed (its records stay): the
// upgrade must put them in place before its conflist names them. A meshed
// pod on every node, started before, keeps exactly its rules, in the
// backend that wrote them and none of istio-cni's in the other, through
// both rollouts and two audit passes of each new agent, with no Istio*
// Event.
func TestRollbackAndUpgradeAcrossNodes(t *testing.T) {
	before := requireAgentsReady(t, env.fleet.Nodes)
	current := before[env.fleet.Nodes[0].Name].Spec.Containers[0].Image
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	previous, err := cluster.BuildPreviousImage(ctx, cluster.PreviousBuild)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range env.fleet.Nodes {
		if err := n.ImportImages(t.Context(), previous.Tarball); err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
	}
	t.Cleanup(func() { restoreImage(t, current) })
	held := heldOnEveryNode(t, "held")
	for i, image := range []string{previous.Ref, current} {
		rollAcrossNodes(t, fmt.Sprintf("roll%d", i), image)
		for _, h := range held {
			if err := h.still(t.Context()); err != nil {
				t.Errorf("after the rollout to %s: %v", image, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		if image == previous.Ref {
			removeUnnamed(t, previous)
		}
	}
}

// removeUnnamed removes from every node this build's shim and kubeconfig
// when the previous build, now running, names its own otherwise.
func removeUnnamed(t *testing.T, previous cluster.Build) {
	t.Helper()
	if previous.Shim() == install.PluginBinary {
		return
	}
	for _, n := range env.fleet.Nodes {
		for _, p := range []string{filepath.Join(n.CNIBinDir, install.PluginBinary), filepath.Join(n.IstioRunDir, install.KubeconfigName)} {
			if err := os.Remove(p); err != nil {
				t.Fatalf("node %s: %v", n.Name, err)
			}
		}
	}
}

// rollAcrossNodes sets the DaemonSet's image and waits for a new agent of
// it, Ready, on every node, and for two audit passes of each, with meshed
// pods starting meanwhile (meshedDuring); at most one node is without a
// Ready agent at a time, and no node's files go missing.
func rollAcrossNodes(t *testing.T, prefix, image string) {
	t.Helper()
	before := requireAgentsReady(t, env.fleet.Nodes)
	stopWatch := watchFiles(t, env.fleet.Nodes)
	maxDown := 0
	meshedDuring(t, prefix, func() {
		kubectl(t, "-n", "istio-cni", "set", "image", "daemonset/istio-cni-node", "install-cni="+image)
		poll.Until(t, 5*time.Minute, "every node's agent replaced, running "+image, func() (bool, string) {
			pods, err := agentPods(t.Context())
			if err != nil {
				return false, err.Error()
			}
			down, done := 0, 0
			for _, n := range env.fleet.Nodes {
				p, ok := pods[n.Name]
				switch {
				case !ok || !allReady(p):
					down++
				case p.Metadata.UID != before[n.Name].Metadata.UID && p.Spec.Containers[0].Image == image:
					done++
				}
			}
			maxDown = max(maxDown, down)
			return done == len(env.fleet.Nodes), fmt.Sprintf("%d of %d nodes rolled, %d without a Ready agent", done, len(env.fleet.Nodes), down)
		})
		waitAuditPasses(t, 2, 1) // at least the held pod
	})
	if gaps := stopWatch(); len(gaps) > 0 {
		t.Errorf("files went missing during the rollout to %s: %v", image, gaps)
	}
	if maxDown > 1 {
		t.Errorf("%d nodes were without a Ready agent at once during the rollout to %s; maxUnavailable is 1", maxDown, image)
	}
}

// restoreImage leaves the fleet as the suite expects it: the DaemonSet on
// image, rolled out.
func restoreImage(t *testing.T, image string) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if out, err := cluster.SetAgentImage(ctx, env.fleet, image, 5*time.Minute); err != nil {
		t.Errorf("restoring %s: %v\n%s", image, err, out)
	}
}

// TestNodeSelectorExcludesOneNode: the DaemonSet's nodeSelector changed to
// leave out one node: that node's agent is deleted for good and it
// uninstalls; the other nodes keep their files throughout (their agents
// are replaced one by one, the template changed); plain pods start on
// every node, and meshed ones where istio-cni still runs. Then the
// selector is restored, and istio-cni, installed on that node after its
// primary, redirects the first meshed pod there.
func TestNodeSelectorExcludesOneNode(t *testing.T) {
	requireAgentsReady(t, env.fleet.Nodes)
	out, kept := env.fleet.Nodes[len(env.fleet.Nodes)-1], env.fleet.Nodes[:len(env.fleet.Nodes)-1]
	for _, n := range kept {
		kubectl(t, "label", "node", n.Name, "e2e.istio-cni/agent=yes", "--overwrite")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		restore := `{"spec":{"template":{"spec":{"nodeSelector":{"e2e.istio-cni/agent":null}}}}}`
		_, _ = env.fleet.Kubectl(ctx, "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p", restore)
		for _, n := range kept {
			_, _ = env.fleet.Kubectl(ctx, "label", "node", n.Name, "e2e.istio-cni/agent-")
		}
	})
	stopWatch := watchFiles(t, kept)
	kubectl(t, "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"e2e.istio-cni/agent":"yes"}}}}}`)
	requireRolledOut(t)
	requireAgentsReady(t, kept)
	poll.Until(t, 2*time.Minute, "node "+out.Name+" uninstalled", func() (bool, string) {
		left := leftOn(out)
		return len(left) == 0, fmt.Sprint("left: ", left)
	})
	if gaps := stopWatch(); len(gaps) > 0 {
		t.Errorf("files went missing on the kept nodes: %v", gaps)
	}
	// The node the DaemonSet keeps off reads "excluded", not wrong.
	requireCheck(t, 0, "node "+out.Name+": excluded: the DaemonSet keeps off it")
	for _, n := range kept {
		if _, err := os.Stat(ownedPath(n)); err != nil {
			t.Errorf("node %s: %v", n.Name, err)
		}
	}
	target := serverAddr(t)
	for i, n := range env.fleet.Nodes {
		startPod(t, n, cluster.PodSpec{Namespace: "default", Name: fmt.Sprintf("plain-selector-%d", i), Target: target, NodeName: n.Name})
	}
	for i, n := range kept {
		name := fmt.Sprintf("meshed-selector-%d", i)
		startPod(t, n, cluster.PodSpec{Namespace: "default", Name: name, Target: target, Sidecar: true, NodeName: n.Name})
		if err := rulesMatchModel(t.Context(), n, name); err != nil {
			t.Error(err)
		}
	}
	kubectl(t, "-n", "istio-cni", "patch", "daemonset", "istio-cni-node", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"e2e.istio-cni/agent":null}}}}}`)
	// The template changed: every node's agent is replaced, one by one.
	// A node whose old agent is still Ready may be next (s56b: `why` met
	// its successor Pending).
	requireRolledOut(t)
	requireAgentsReady(t, env.fleet.Nodes)
	// istio-cni installed after the primary: on the node left out, the
	// agent chains after the config Flannel wrote long before, and the
	// first meshed pod there is redirected at its first attempt.
	back := startPod(t, out, cluster.PodSpec{Namespace: "default", Name: "meshed-selector-back", Target: target, Sidecar: true, NodeName: out.Name})
	requireFirstAttempt(t, out, back)
	if err := rulesMatchModel(t.Context(), out, back.Metadata.Name); err != nil {
		t.Error(err)
	}
	// kubectl istio-cni: each node's meshed pod explained by that node's
	// agent; every node ok again.
	meshed := map[*cluster.Node]string{out: back.Metadata.Name}
	for i, n := range kept {
		meshed[n] = fmt.Sprintf("meshed-selector-%d", i)
	}
	requireWhyFromItsNode(t, meshed)
	requireCheck(t, 0, fmt.Sprintf("all %d node(s) ok", len(env.fleet.Nodes)))
}

// requireRolledOut waits for the DaemonSet's rollout: every node it
// selects runs an agent of its current template, available.
func requireRolledOut(t *testing.T) {
	t.Helper()
	if err := env.fleet.WaitInstalled(t.Context()); err != nil {
		t.Fatalf("the DaemonSet's rollout: %v", err)
	}
}

// leftOn lists what istio-cni has on node n: its binaries, any config
// chaining it and anything in its run directory.
func leftOn(n *cluster.Node) []string {
	var left []string
	for _, p := range []string{filepath.Join(n.CNIBinDir, install.PluginBinary), filepath.Join(n.CNIBinDir, install.FullBinary), filepath.Join(n.CNIBinDir, install.LookupBinary), ownedPath(n)} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, p)
		}
	}
	run, _ := os.ReadDir(n.IstioRunDir)
	for _, e := range run {
		left = append(left, filepath.Join(n.IstioRunDir, e.Name()))
	}
	cd, _ := install.ReadConfDir(n.CNINetDir)
	for _, f := range cd.Files {
		if chain.HasEntry(f.Data) {
			left = append(left, filepath.Join(n.CNINetDir, f.Name))
		}
	}
	return left
}

// watchFiles polls each node's owned conflist, and the plugin binary and
// kubeconfig its istio-cni entry names, every 5 ms until the returned
// function is called, which says which went missing, where and when. It
// follows the entry, not one build's file names: the previous build's
// shim and kubeconfig are named otherwise.
func watchFiles(t *testing.T, nodes []*cluster.Node) func() []string {
	var mu sync.Mutex
	var gaps []string
	start := time.Now()
	gap := func(what string, n *cluster.Node) {
		mu.Lock()
		defer mu.Unlock()
		if len(gaps) < 20 {
			gaps = append(gaps, fmt.Sprintf("%s on %s at %v", what, n.Name, time.Since(start).Round(time.Millisecond)))
		}
	}
	named := make([]namedFiles, len(nodes))
	stop := poll.Every(5*time.Millisecond, func() {
		for i, n := range nodes {
			files, err := named[i].read(ownedPath(n))
			if err != nil {
				gap(err.Error(), n)
				continue
			}
			for _, p := range []string{filepath.Join(n.CNIBinDir, files.binary), filepath.Join(n.IstioRunDir, files.kubeconfig)} {
				if _, err := os.Stat(p); err != nil {
					gap(filepath.Base(p), n)
				}
			}
		}
	})
	t.Cleanup(stop) // a test that failed before reading the gaps
	return func() []string {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return gaps
	}
}

// namedFiles is what an owned conflist's istio-cni entry names: its
// binary (the entry's type) and its kubeconfig's file name, read again
// only when the conflist changes.
type namedFiles struct {
	binary, kubeconfig string
	seen               os.FileInfo
}

// read returns the files the conflist at path names, or why it names none.
func (f *namedFiles) read(path string) (namedFiles, error) {
	st, err := os.Stat(path)
	if err != nil {
		return namedFiles{}, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if f.seen != nil && os.SameFile(f.seen, st) && f.seen.ModTime().Equal(st.ModTime()) && f.seen.Size() == st.Size() {
		return *f, nil
	}
	data, err := os.ReadFile(path) // #nosec G304 -- the node's conflist
	if err != nil {
		return namedFiles{}, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	var list struct {
		Plugins []struct{ Type, Kubeconfig string }
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return namedFiles{}, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	for _, p := range list.Plugins {
		if (p.Type == chain.PluginType || p.Type == chain.LegacyType) && p.Kubeconfig != "" {
			*f = namedFiles{binary: p.Type, kubeconfig: filepath.Base(p.Kubeconfig), seen: st}
			return *f, nil
		}
	}
	return namedFiles{}, fmt.Errorf("%s: no istio-cni entry naming its kubeconfig", filepath.Base(path))
}
