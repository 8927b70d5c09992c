package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/kubectl-istio_cni/kubectlplugin -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (-update rewrites it); got:\n%s", path, got)
	}
}

// call is one command the fake exec ran.
type call struct {
	pod     string
	command string
}

// fakeExec answers each agent pod with what answers holds for it.
type fakeExec struct {
	answers map[string]answer // by pod name
	mu      sync.Mutex        // check asks agents at once
	calls   []call
}

type answer struct {
	code           int
	stdout, stderr string
	err            error
}

func (f *fakeExec) Exec(_ context.Context, namespace, pod, container string, command []string, stdout, stderr io.Writer) (int, error) {
	if container != agentContainer {
		return 1, fmt.Errorf("container %q", container)
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{pod: namespace + "/" + pod, command: strings.Join(command, " ")})
	f.mu.Unlock()
	a := f.answers[pod]
	_, _ = io.WriteString(stdout, a.stdout)
	_, _ = io.WriteString(stderr, a.stderr)
	return a.code, a.err
}

var agentLabels = map[string]string{"app.kubernetes.io/name": "istio-cni", "app.kubernetes.io/component": "node-agent"}

func node(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
}

func agentPod(name, node string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-cni", Name: name, Labels: agentLabels},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: status, Reason: map[bool]string{false: "ContainersNotReady"}[ready]}}},
	}
}

func daemonSet(nodeSelector map[string]string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-cni", Name: "istio-cni-node", Labels: agentLabels},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			HostNetwork: true, NodeSelector: nodeSelector, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}},
	}
}

func meshedPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
}

func cluster(ex *fakeExec, objs ...runtime.Object) Cluster {
	return Cluster{Client: fake.NewClientset(objs...), Exec: ex, Namespace: "istio-cni"}
}

const inspectOK = "pod:       default/web on node b, Running\nverdict:   ok: redirected as the plugin decides\n"

// why asks the agent on the pod's node, and no other, and passes its
// exit status through.
func TestWhyAsksThePodsNode(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{
		"agent-b": {code: 3, stdout: inspectOK},
		"agent-a": {code: 1, stderr: "wrong node"},
	}}
	c := cluster(ex, daemonSet(nil), node("a", nil), node("b", nil), agentPod("agent-a", "a", true), agentPod("agent-b", "b", true), meshedPod("default", "web", "b"))
	var out, errOut bytes.Buffer
	code, err := why(t.Context(), c, "default", "web", outputText, &out, &errOut)
	if err != nil || code != 3 {
		t.Fatalf("why: %d, %v", code, err)
	}
	if len(ex.calls) != 1 || ex.calls[0] != (call{"istio-cni/agent-b", "/install-cni inspect default/web"}) {
		t.Errorf("ran %v", ex.calls)
	}
	checkGolden(t, "why.txt", out.String())
}

func TestWhyJSONWrapsInspects(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{"agent-b": {stdout: `{"version":1,"verdict":{"code":"redirected"}}` + "\n"}}}
	c := cluster(ex, daemonSet(nil), node("b", nil), agentPod("agent-b", "b", true), meshedPod("default", "web", "b"))
	var out bytes.Buffer
	code, err := why(t.Context(), c, "default", "web", outputJSON, &out, io.Discard)
	if err != nil || code != 0 {
		t.Fatalf("why: %d, %v", code, err)
	}
	if ex.calls[0].command != "/install-cni inspect -o json default/web" {
		t.Errorf("ran %v", ex.calls)
	}
	checkGolden(t, "why.json", out.String())
}

// A running agent that is not Ready is asked all the same (it is the one
// that knows why), and the answer says it is not Ready.
func TestWhyAsksANotReadyAgent(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{"agent-b": {stdout: inspectOK}}}
	var out bytes.Buffer
	code, err := why(t.Context(), cluster(ex, daemonSet(nil), node("b", nil), agentPod("agent-b", "b", false), meshedPod("default", "web", "b")),
		"default", "web", outputText, &out, io.Discard)
	if err != nil || code != exitOK || !strings.Contains(out.String(), "agent:     not Ready (ContainersNotReady") || !strings.Contains(out.String(), "verdict:   ok") {
		t.Errorf("why: %d, %v\n%s", code, err, out.String())
	}
}

// Each way why cannot answer names what is wrong.
func TestWhyErrorsNameTheCause(t *testing.T) {
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"no pod", []runtime.Object{daemonSet(nil)}, "pod default/web not found"},
		{"not scheduled", []runtime.Object{daemonSet(nil), meshedPod("default", "web", "")}, "pod default/web is not scheduled yet"},
		{"excluded", []runtime.Object{daemonSet(map[string]string{"agent": "yes"}), node("b", nil), meshedPod("default", "web", "b")},
			"no agent pod on node b: DaemonSet istio-cni/istio-cni-node keeps off it (its nodeSelector or required node affinity does not match"},
		{"missing", []runtime.Object{daemonSet(nil), node("b", nil), meshedPod("default", "web", "b")},
			"no agent pod on node b: DaemonSet istio-cni/istio-cni-node should run one there, but none exists"},
		{"no daemonset", []runtime.Object{node("b", nil), meshedPod("default", "web", "b")},
			"no agent pod on node b: no istio-cni DaemonSet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := why(t.Context(), cluster(&fakeExec{}, tc.objs...), "default", "web", outputText, io.Discard, io.Discard)
			if code != exitError || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("why: %d, %v; want 1 and %q", code, err, tc.want)
			}
		})
	}
}

func TestWhyPassesInspectsError(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{"agent-b": {code: 1, stderr: "install-cni: reading pod default/web: forbidden\n"}}}
	c := cluster(ex, daemonSet(nil), node("b", nil), agentPod("agent-b", "b", true), meshedPod("default", "web", "b"))
	code, err := why(t.Context(), c, "default", "web", outputText, io.Discard, io.Discard)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "node b (pod istio-cni/agent-b) failed (exit 1): install-cni: reading pod default/web: forbidden") {
		t.Errorf("why: %d, %v", code, err)
	}
}

func statusJSON(ready bool, chained bool, unredirected, missed int) string {
	return fmt.Sprintf(`{"version":1,"build":"install-cni v1","ready":%t,"readyReason":%q,"cni":{"config":"10-flannel.conflist","chained":%t},"unredirected":%d,"checked":4,"unchecked":0,"missedInjection":%d}`,
		ready, map[bool]string{false: "no valid primary CNI config"}[ready], chained, unredirected, missed)
}

// check: one row per node, each wrong node named with why, an excluded
// node ok, exit 3.
func TestCheckJudgesEveryNode(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{
		"agent-a": {stdout: statusJSON(true, true, 0, 0)},
		"agent-b": {code: 3, stdout: statusJSON(false, false, 1, 2)},
		"agent-d": {err: fmt.Errorf("error dialing backend: connection refused")},
	}}
	ds := daemonSet(map[string]string{"agent": "yes"})
	yes := map[string]string{"agent": "yes"}
	c := cluster(ex, ds,
		node("a", yes), node("b", yes), node("c", nil), node("d", yes, corev1.Taint{Key: defaultTaintKey, Effect: corev1.TaintEffectNoSchedule}), node("e", yes),
		agentPod("agent-a", "a", true), agentPod("agent-b", "b", false), agentPod("agent-d", "d", true))
	var out bytes.Buffer
	code, err := check(t.Context(), c, defaultTaintKey, outputText, &out)
	if err != nil || code != exitWrong {
		t.Fatalf("check: %d, %v", code, err)
	}
	checkGolden(t, "check.txt", out.String())
	out.Reset()
	if _, err := check(t.Context(), c, defaultTaintKey, outputJSON, &out); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "check.json", out.String())
}

func TestCheckAllOK(t *testing.T) {
	ex := &fakeExec{answers: map[string]answer{"agent-a": {stdout: statusJSON(true, true, 0, 0)}}}
	c := cluster(ex, daemonSet(map[string]string{"agent": "yes"}), node("a", map[string]string{"agent": "yes"}), node("c", nil), agentPod("agent-a", "a", true))
	var out bytes.Buffer
	code, err := check(t.Context(), c, defaultTaintKey, outputText, &out)
	if err != nil || code != exitOK {
		t.Fatalf("check: %d, %v\n%s", code, err, out.String())
	}
	if !strings.Contains(out.String(), "node c: excluded") || !strings.Contains(out.String(), "all 2 node(s) ok") {
		t.Errorf("check:\n%s", out.String())
	}
	if len(ex.calls) != 1 || ex.calls[0].command != "/install-cni inspect --node -o json" {
		t.Errorf("ran %v", ex.calls)
	}
}

// TestCheckNotReadyNodeAndTaintKey: a node whose Ready condition is not
// True is wrong without an exec that would wait on its kubelet; the
// startup taint's key is the one the DaemonSet's settings give the agents.
func TestCheckNotReadyNodeAndTaintKey(t *testing.T) {
	const key = "example.com/cni-not-ready"
	ex := &fakeExec{answers: map[string]answer{"agent-a": {stdout: statusJSON(true, true, 0, 0)}}}
	ds := daemonSet(nil)
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: agentContainer}}
	ds.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "istio-cni-config-abc"}}}}
	down := node("b", nil)
	down.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}
	c := cluster(ex, ds, node("a", nil, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}), down,
		agentPod("agent-a", "a", true), agentPod("agent-b", "b", true),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-config-abc", Namespace: "istio-cni"}, Data: map[string]string{"TAINT_KEY": key}})
	var out bytes.Buffer
	code, err := check(t.Context(), c, "", outputText, &out)
	if err != nil || code != exitWrong {
		t.Fatalf("check: %d, %v\n%s", code, err, out.String())
	}
	if !strings.Contains(out.String(), "the node is not Ready (NodeStatusUnknown") || !strings.Contains(out.String(), "2 of 2 node(s) wrong") {
		t.Errorf("check:\n%s", out.String())
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.calls) != 1 || ex.calls[0].pod != "istio-cni/agent-a" {
		t.Errorf("ran %v, want agent-a asked only", ex.calls)
	}
}

// The reading of the agent's node summary holds to the documents
// pkg/nodeagent/inspect writes (its goldens).
func TestReadsInspectNodeDocuments(t *testing.T) {
	for name, want := range map[string]func(nodeStatus) bool{
		"node-ok.json": func(s nodeStatus) bool {
			return s.Version == 1 && s.Ready && s.CNI.Chained && *s.Unredirected == 0 && *s.MissedInjection == 0
		},
		"node-bad.json": func(s nodeStatus) bool {
			return !s.Ready && s.ReadyReason != "" && !s.CNI.Chained && *s.Unredirected == 2 && *s.MissedInjection == 1
		},
	} {
		data, err := os.ReadFile(filepath.Join("..", "..", "..", "pkg", "nodeagent", "inspect", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var s nodeStatus
		if err := json.Unmarshal(data, &s); err != nil || !want(s) {
			t.Errorf("%s read as %+v (%v)", name, s, err)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code := Main(t.Context(), []string{"version"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "kubectl-istio_cni ") {
		t.Errorf("version: %d %q", code, out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frob"}, {"why"}, {"why", "a/b", "c"}, {"check", "x"}, {"logs"}, {"why", "-o", "yaml", "a/b"}} {
		if code := Main(t.Context(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestLogsOfTheNodesAgent(t *testing.T) {
	c := cluster(&fakeExec{}, daemonSet(nil), node("a", nil), node("b", nil), agentPod("agent-a", "a", true))
	var out bytes.Buffer
	if err := logs(t.Context(), c, "a", LogOptions{Tail: 10}, &out); err != nil || out.String() != "fake logs" {
		t.Errorf("logs a: %q, %v", out.String(), err)
	}
	if err := logs(t.Context(), c, "b", LogOptions{Tail: -1}, &out); err == nil || !strings.Contains(err.Error(), "no agent pod on node b: DaemonSet istio-cni/istio-cni-node should run one there") {
		t.Errorf("logs b: %v", err)
	}
}
