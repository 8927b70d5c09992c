// Package apipod converts client-go's Pod into pkg/kube's subset for the
// agent's callers (the audit, inspect). It lives apart from pkg/kube so the
// plugin, exec'd for every pod, never links the full API types.
package apipod

import (
	"encoding/json"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/kube"
)

// ToKube gives the decision the same view of the pod the plugin decodes from
// the API: the JSON of the API object read into pkg/kube's subset, so the
// two can never disagree on a field.
func ToKube(pod *corev1.Pod) (*kube.Pod, error) {
	data, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	var kp kube.Pod
	if err := json.Unmarshal(data, &kp); err != nil {
		return nil, err
	}
	return &kp, nil
}

// IPs are the pod's addresses from its status; unparsable ones are skipped.
func IPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}
