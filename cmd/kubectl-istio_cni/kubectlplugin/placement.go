package kubectlplugin

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// excludedBy says why the DaemonSet whose pod template is tmpl runs no pod
// on node ("" when it should run one): the DaemonSet controller's test for
// creating a daemon pod (NodeShouldRunDaemonPod in k8s.io/kubernetes
// pkg/controller/daemon): the template's node name, node selector and
// required node affinity match, and every NoSchedule and NoExecute taint
// is tolerated by the template or by the tolerations the controller adds.
// The agent's own shutdown test (pkg/nodeagent/lifecycle runsOn) is the
// same but for NoSchedule, which keeps a new pod off and a running one on.
func excludedBy(tmpl corev1.PodSpec, node *corev1.Node) string {
	if tmpl.NodeName != "" && tmpl.NodeName != node.Name {
		return fmt.Sprintf("its template names node %s", tmpl.NodeName)
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: tmpl}).Match(node); err == nil && !ok {
		return "its nodeSelector or required node affinity does not match the node's labels"
	}
	tolerations := append(append([]corev1.Toleration(nil), tmpl.Tolerations...), daemonTolerations(tmpl.HostNetwork)...)
	if taint, untolerated := v1helper.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute || t.Effect == corev1.TaintEffectNoSchedule
	}, false); untolerated {
		return fmt.Sprintf("its tolerations do not tolerate the node's taint %s", taint.ToString())
	}
	return ""
}

// daemonTolerations are those the DaemonSet controller adds to every
// daemon pod (AddOrUpdateDaemonPodTolerations in pkg/controller/daemon/util).
func daemonTolerations(hostNetwork bool) []corev1.Toleration {
	exists := func(key string, effect corev1.TaintEffect) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: effect}
	}
	ts := []corev1.Toleration{
		exists(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
		exists(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule),
		exists(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule),
	}
	if hostNetwork {
		ts = append(ts, exists(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule))
	}
	return ts
}
