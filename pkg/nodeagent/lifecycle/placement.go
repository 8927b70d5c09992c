package lifecycle

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// placement is whether the DaemonSet, as it is now, keeps a pod on this
// node.
type placement int

const (
	placementUnknown placement = iota // not read: the DaemonSet's spec or the Node
	runsHere
	notHere
)

// runsOn is the DaemonSet controller's own test for keeping a daemon pod
// on a node (NodeShouldRunDaemonPod's shouldContinueRunning, in
// k8s.io/kubernetes pkg/controller/daemon): the template's node name, node
// selector and required node affinity match the node, and every NoExecute
// taint on it is tolerated, by the template's tolerations or by those the
// controller adds to every daemon pod. A NoSchedule taint keeps new pods
// off but a running one on, so it does not count. When this is false the
// controller deletes the agent's pod for good: a nodeSelector, affinity or
// tolerations change moved the DaemonSet off the node.
func runsOn(tmpl corev1.PodSpec, node *corev1.Node) (bool, string) {
	if tmpl.NodeName != "" && tmpl.NodeName != node.Name {
		return false, fmt.Sprintf("its template names node %s", tmpl.NodeName)
	}
	pod := &corev1.Pod{Spec: tmpl}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err == nil && !ok {
		return false, "its nodeSelector or required node affinity no longer matches the node's labels"
	}
	tolerations := append(append([]corev1.Toleration(nil), tmpl.Tolerations...), daemonTolerations(tmpl.HostNetwork)...)
	// No comparison operators (Gt, Lt): alpha and off by default.
	if taint, untolerated := v1helper.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoExecute
	}, false); untolerated {
		return false, fmt.Sprintf("its tolerations no longer tolerate the node's taint %s", taint.ToString())
	}
	return true, ""
}

// daemonTolerations are those the DaemonSet controller adds to every daemon
// pod (AddOrUpdateDaemonPodTolerations in pkg/controller/daemon/util), so
// that node problems never evict one.
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
