package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// UninstallJob writes deployments/optional/uninstall-node-job.yaml into
// dir as a user adapts it: the node's name substituted (the documented
// sed), and, on a single node, its hostPaths pointed at this node's
// directories. It returns the file's path.
func (n *Node) UninstallJob(dir string) (string, error) {
	base, err := DeploymentsDir()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(base, "optional", "uninstall-node-job.yaml"))
	if err != nil {
		return "", err
	}
	s := strings.ReplaceAll(string(b), "NODE_NAME", n.Name)
	paths := map[string]string{
		"path: /opt/cni/bin\n": "path: " + n.CNIBinDir + "\n", "path: /etc/cni/net.d\n": "path: " + n.CNINetDir + "\n",
		"path: /var/run/istio-cni\n": "path: " + n.IstioRunDir + "\n",
	}
	if n.joined {
		paths = nil // a fleet node has the standard host paths (nodeNS)
	}
	for from, to := range paths {
		if !strings.Contains(s, from) {
			return "", fmt.Errorf("uninstall-node-job.yaml has no %q", strings.TrimSpace(from))
		}
		s = strings.Replace(s, from, to, 1)
	}
	path := filepath.Join(dir, "uninstall-node-job.yaml")
	return path, os.WriteFile(path, []byte(s), 0o600)
}
