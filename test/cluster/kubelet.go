package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// kubeletConfig is the KubeletConfiguration. cgroupfs and failCgroupV1:
// this VM runs cgroup v1 without systemd; failSwapOn: swap may be on.
// Eviction thresholds are low so a busy CI disk never evicts test pods.
// Authentication and authorization are off on the kubelet's own API,
// which listens on the node's IP only (where the API server dials it for
// kubectl exec and logs: its pods' gateway, on this machine's bridge or
// in the fleet node's own network namespace).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
podLogsDir: %s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
`

func (n *Node) startKubelet(_ context.Context, b nodeBins, dir string) error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	root := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(root, 0o750); err != nil {
		return err
	}
	cfg := filepath.Join(root, "config.yaml")
	cgroupRoot := cgroupRootName(n.bridge)
	if err := createCgroupRoot(cgroupRoot); err != nil {
		return fmt.Errorf("cgroup root for kubelet: %w", err)
	}
	data := fmt.Sprintf(kubeletConfig, cgroupRoot, n.ContainerdSocket, n.NodeIP, ports[0], ports[1], n.PodLogDir)
	if err := os.WriteFile(cfg, []byte(data), 0o600); err != nil {
		return err
	}
	args := []string{
		"--config=" + cfg,
		"--kubeconfig=" + n.Kubeconfig,
		"--root-dir=" + n.kubeletRootDir(),
		"--cert-dir=" + filepath.Join(root, "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.NodeIP.String(),
		"--v=2",
	}
	n.KubeletPort = ports[0]
	p, err := startProc(n.launcher, "kubelet", b.kubelet, args, filepath.Join(dir, "kubelet.log"))
	if err == nil {
		n.components = append(n.components, p)
	}
	return err
}

// kubeletRootDir is kubelet's --root-dir, the node's /var/lib/kubelet.
func (n *Node) kubeletRootDir() string { return filepath.Join(n.dir, "kubelet", "root") }
