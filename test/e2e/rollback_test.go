package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// 13b. A rollback to the previous build's image (cluster.PreviousBuild,
// built from history) and an upgrade back to this one, each the way an
// operator does it (kubectl set image), with meshed pods running whose
// records must carry their settings across builds (INVALID_DROP, TPROXY,
// DNS capture, dual stack) and a plain pod: no byte of their rules or
// policy routing changes (read in their namespaces over and over while
// the DaemonSet rolls, and until after each new agent has made two full
// audit passes), no Istio* Event appears on any pod, no pod is deleted,
// restarted or given a new sandbox. Meshed pods started while it rolls
// start at their first attempt, redirected. A rollout passes through a
// moment where the new agent answers the old shim; two mixed images (one
// build's agent, the other's plugin) hold that moment, each way, for a
// stream of pods. Then the rollback and upgrade again with
// AUDIT_ACTION=delete, where an agent that misread a record would delete
// the pod.
func TestUpgradeAndRollbackAcrossBuilds(t *testing.T) {
	requireInstalled(t)
	current, previous, mixed := skewImages(t)
	t.Cleanup(func() { restoreBuild(t, current.Ref) })
	w := startSkewWatch(t)
	t.Logf("%d pods whose state is watched: %s", len(w.pods), w.names())
	// A rollback and an upgrade; then each mix a rollout passes through,
	// held, where the last pod's ADD must be one build's shim's, run by
	// the other build's agent; then the rollback and upgrade again with
	// AUDIT_ACTION=delete.
	for _, step := range []struct {
		action  string
		to      cluster.Build
		crossed bool
	}{
		{"repair", previous, false}, {"repair", current, false},
		{"repair", mixed[0], true}, {"repair", mixed[1], true}, {"repair", current, false},
		{"delete", previous, false}, {"delete", current, false},
	} {
		if step.action == "delete" && !w.deletes {
			auditDeletes(t)
			w.deletes = true
		}
		w.phase(fmt.Sprintf("AUDIT_ACTION=%s, to %s", step.action, step.to.Ref))
		rollTo(t, w, step.to.Ref, fmt.Sprintf("skew-%s-%d", step.action[:3], len(w.log)), step.crossed)
	}
	for _, p := range w.pods {
		if p.variant.meshed {
			assertThroughProxyFromNow(t, p.pod)
		} else {
			assertDirect(t, p.pod)
		}
	}
	w.stop()
	w.check(t)
	t.Logf("the watched pods' namespaces were read %d times each: %s", w.rounds(), strings.Join(w.log, "; "))
}

// skewImages are the current build (as the DaemonSet runs it), the
// previous one (built from history) and the two mixes of their agents and
// plugins (the previous agent with this shim, this agent with the
// previous shim), all imported into the node.
func skewImages(t *testing.T) (current, previous cluster.Build, mixed [2]cluster.Build) {
	t.Helper()
	current, previous = previousImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	for i, m := range []struct{ agent, plugin cluster.Build }{{previous, current}, {current, previous}} {
		name := [2]string{"previous-agent-current-plugin", "current-agent-previous-plugin"}[i]
		var err error
		if mixed[i], err = cluster.BuildMixedImage(ctx, m.agent, m.plugin, "localhost/istio-cni/install-cni:"+name,
			filepath.Join(t.TempDir(), name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.node.ImportImages(ctx, mixed[0].Tarball, mixed[1].Tarball); err != nil {
		t.Fatal(err)
	}
	return current, previous, mixed
}

// previousImage is the current build (as the DaemonSet runs it) and the
// previous one (built from history), imported into the node.
func previousImage(t *testing.T) (current, previous cluster.Build) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	previous, err := cluster.BuildPreviousImage(ctx, cluster.PreviousBuild)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous build (%s): %s, %v", cluster.PreviousBuild[:12], previous.Ref, time.Since(start).Round(time.Second))
	current = cluster.Build{Ref: daemonSetImage(t), BinDir: filepath.Dir(env.installCNI)}
	if current.Ref == previous.Ref {
		t.Fatalf("test bug: the DaemonSet already runs the previous build's image %s", previous.Ref)
	}
	if err := env.node.ImportImages(ctx, previous.Tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("the builds' binaries: %s", compareBinaries(previous, current))
	return current, previous
}

// compareBinaries says which of the image's binaries differ between two
// builds: a skew of identical binaries proves little.
func compareBinaries(a, b cluster.Build) string {
	var out []string
	for _, name := range []string{"shim", "istio-cni-full", "istio-cni-apilookup", "install-cni"} {
		na, nb := name, name
		if name == "shim" {
			na, nb = a.Shim(), b.Shim()
		}
		x, errA := os.ReadFile(filepath.Join(a.BinDir, na))
		y, errB := os.ReadFile(filepath.Join(b.BinDir, nb))
		switch {
		case errA != nil || errB != nil:
			out = append(out, fmt.Sprintf("%s unreadable (%v, %v)", name, errA, errB))
		case bytes.Equal(x, y):
			out = append(out, name+" the same")
		default:
			out = append(out, name+" differs")
		}
	}
	return strings.Join(out, ", ")
}

// rollTo rolls the DaemonSet to image and waits for its agent and two
// of its full audit passes, starting meshed pods meanwhile and one after;
// then checks those pods, the watched pods and every pod's Events. With
// crossed (an image of one build's agent and the other's plugin), the
// last pod's ADD must have been run by the agent, for the shim.
func rollTo(t *testing.T, w *skewWatch, image, prefix string, crossed bool) {
	t.Helper()
	old := installerPod(t)
	rounds := w.rounds()
	kubectl(t, "-n", "istio-cni", "set", "image", "daemonset/istio-cni-node", "install-cni="+image)
	rolled := make(chan struct{})
	stream := startSkewStream(t, prefix, rolled)
	poll.Until(t, 3*time.Minute, "the agent of "+image, func() (bool, string) {
		p, ok := installerPodOrEmpty(t)
		return ok && p.Metadata.Name != old && allReady(p) && p.Spec.Containers[0].Image == image, agentPodStates(t)
	})
	requireInstalled(t)
	waitAuditPasses(t, 2, w.meshed())
	close(rolled)
	started := stream()
	// One more read of the watched pods, begun after those passes.
	after := w.rounds()
	poll.UntilTrue(t, time.Minute, "a read of the watched pods", func() bool { return w.rounds() > after+1 })
	w.check(t)
	var b strings.Builder
	for _, s := range started {
		fmt.Fprintf(&b, "\n  %s, created %s: ADD by %s", s.name, s.phase, s.ranIn)
		if s.err != nil {
			t.Errorf("a pod started during the rollout to %s: %v", image, s.err)
		}
		if crossed && s.after && s.err == nil && s.ranIn != "agent" {
			t.Errorf("%s: its ADD by %s, want the agent's for the other build's shim: the mix %s was not exercised", s.name, s.ranIn, image)
		}
	}
	if len(started) < 2 {
		t.Errorf("%d pods started during and after the rollout to %s, want at least 2", len(started), image)
	}
	t.Logf("to %s: the watched pods read %d times while it rolled and its agent audited; pods started meanwhile:%s",
		image, w.rounds()-rounds, b.String())
	w.log = append(w.log, fmt.Sprintf("%s: %d reads", image, w.rounds()-rounds))
	if t.Failed() {
		t.FailNow()
	}
}

// daemonSetImage is the image the DaemonSet's agent container runs.
func daemonSetImage(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "-n", "istio-cni", "get", "daemonset", "istio-cni-node",
		"-o", "jsonpath={.spec.template.spec.containers[?(@.name==\"install-cni\")].image}"))
}

// restoreBuild leaves the node as the suite expects it: the current
// build's image, AUDIT_ACTION=repair, the agent ready.
func restoreBuild(t *testing.T, current string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if out, err := cluster.SetAgentImage(ctx, env.node, current, 3*time.Minute); err != nil {
		t.Errorf("restoring the current build: %v\n%s", err, out)
	}
}

// auditDeletes turns AUDIT_ACTION=delete on (with the optional pod writes
// it needs) until the test ends; the agent restarts with it.
func auditDeletes(t *testing.T) {
	t.Helper()
	base, err := cluster.DeploymentsDir()
	if err != nil {
		t.Fatal(err)
	}
	writes := filepath.Join(base, "optional", "audit-pod-writes.yaml")
	kubectl(t, "apply", "-f", writes)
	t.Cleanup(func() {
		if err := setAgentSetting(context.Background(), "AUDIT_ACTION", "repair"); err != nil {
			t.Error(err)
		}
		_, _ = env.node.Kubectl(context.Background(), "delete", "-f", writes, "--ignore-not-found")
	})
	if err := setAgentSetting(t.Context(), "AUDIT_ACTION", "delete"); err != nil {
		t.Fatal(err)
	}
	requireInstalled(t)
}

// waitAuditPasses waits until the running agent has finished n full
// audit passes that began after this call, the last of which checked at
// least meshed pods.
func waitAuditPasses(t *testing.T, n float64, meshed int) {
	t.Helper()
	poll.Until(t, 2*time.Minute, fmt.Sprintf("%v full audit passes checking %d meshed pods", n, meshed),
		cluster.AuditPasses(t.Context(), env.agent.MetricsURL(), n, meshed))
}
