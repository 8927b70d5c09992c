package cluster

import (
	"context"
	"time"
)

// Kubectler runs kubectl against a cluster: a Node's or a Fleet's.
type Kubectler interface {
	Kubectl(ctx context.Context, args ...string) (string, error)
}

// SetAgentImage sets the image of istio-cni's DaemonSet's agent as an
// operator does (kubectl set image) and waits up to timeout for the
// rollout; the output is kubectl's.
func SetAgentImage(ctx context.Context, k Kubectler, image string, timeout time.Duration) (string, error) {
	out, err := k.Kubectl(ctx, "-n", "istio-cni", "set", "image", "daemonset/istio-cni-node", "install-cni="+image)
	if err != nil {
		return out, err
	}
	more, err := k.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout="+timeout.String())
	return out + more, err
}
