package cluster

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxAttempts lists the attempt number of every sandbox the runtime
// holds for the pod with this UID, ready or not: a pod that started at
// its first attempt has exactly one, attempt 0 (kubelet makes a new
// sandbox, attempt+1, for each failed or lost one).
func (n *Node) SandboxAttempts(ctx context.Context, podUID string) ([]uint32, error) {
	rt, closeConn, err := n.cri()
	if err != nil {
		return nil, err
	}
	defer func() { _ = closeConn() }()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": podUID},
	}})
	if err != nil {
		return nil, err
	}
	attempts := make([]uint32, 0, len(list.Items))
	for _, sb := range list.Items {
		attempts = append(attempts, sb.Metadata.Attempt)
	}
	return attempts, nil
}
