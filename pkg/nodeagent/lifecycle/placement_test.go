package lifecycle

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runsOn is the DaemonSet controller's own rule for keeping a daemon pod
// on a node; each row is a way users move the DaemonSet off a node, or a
// node state that must not count as one.
func TestRunsOn(t *testing.T) {
	node := func(labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	linux := map[string]string{"kubernetes.io/os": "linux", "pool": "mesh"}
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Effect: effect}
	}
	everything := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	for _, tc := range []struct {
		name string
		tmpl corev1.PodSpec
		node *corev1.Node
		want string // "" runs here, else a part of why not
	}{
		{"the chart's default: linux, every taint tolerated", corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Tolerations: everything},
			node(linux, taint("dedicated", corev1.TaintEffectNoExecute)), ""},
		{"nodeSelector changed to another pool", corev1.PodSpec{NodeSelector: map[string]string{"pool": "edge"}}, node(linux), "nodeSelector"},
		{"the node relabelled", corev1.PodSpec{NodeSelector: map[string]string{"pool": "mesh"}}, node(map[string]string{"pool": "batch"}), "nodeSelector"},
		{"required node affinity", corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"mesh"}}}}}}}}},
			node(linux), "affinity"},
		{"tolerations narrowed: a NoExecute taint no longer tolerated", corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}},
			node(linux, taint("dedicated", corev1.TaintEffectNoExecute)), "dedicated"},
		{"a NoSchedule taint keeps a running daemon pod", corev1.PodSpec{}, node(linux, taint("dedicated", corev1.TaintEffectNoSchedule)), ""},
		{"a drain (unschedulable) keeps it", corev1.PodSpec{}, node(linux, taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)), ""},
		{"a node not ready keeps it (the controller's own toleration)", corev1.PodSpec{}, node(linux, taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)), ""},
		{"a node unreachable keeps it", corev1.PodSpec{}, node(linux, taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)), ""},
		{"the template names another node", corev1.PodSpec{NodeName: "node-b"}, node(linux), "node-b"},
	} {
		ok, why := runsOn(tc.tmpl, tc.node)
		switch {
		case tc.want == "" && !ok:
			t.Errorf("%s: not here (%s), want it kept", tc.name, why)
		case tc.want != "" && (ok || !strings.Contains(why, tc.want)):
			t.Errorf("%s: runs here %v (%q), want not, naming %q", tc.name, ok, why, tc.want)
		}
	}
}
