package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// PodToken returns the service-account token kubelet projected into the
// pod's volumes on this node (kube-api-access-*), as a process in the pod
// reads it.
func (n *Node) PodToken(p Pod) (string, error) {
	root, err := n.HostPath(n.kubeletRootDir())
	if err != nil {
		return "", err
	}
	pattern := filepath.Join(root, "pods", p.Metadata.UID, "volumes", "kubernetes.io~projected", "*", "token")
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		return "", fmt.Errorf("pod %s/%s: no projected token at %s (%v)", p.Metadata.Namespace, p.Metadata.Name, pattern, err)
	}
	b, err := os.ReadFile(paths[0]) // #nosec G304 -- kubelet's file for the test's pod
	return string(b), err
}
