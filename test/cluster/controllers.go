package cluster

import (
	"context"
	"path/filepath"
)

// startControllerManager runs the controllers a single node needs:
// DaemonSets, ReplicaSets, garbage collection, service accounts and their
// tokens, the root CA ConfigMap. Those that manage node IPAM (but on a
// Flannel fleet), node health (it would taint and evict from a node that
// is not a cloud VM), Services and routes are off.
func (n *Node) startControllerManager(_ context.Context, b nodeBins, dir string) error {
	controllers := "*,-nodeipam,-nodelifecycle,-service,-route,-cloud-node-lifecycle"
	var ipam []string
	if n.clusterCIDR.IsValid() {
		// Node IPAM on, as kubeadm's --pod-network-cidr turns it on: each
		// node's spec.podCIDR, Flannel's subnet manager's input.
		controllers = "*,-nodelifecycle,-service,-route,-cloud-node-lifecycle"
		ipam = []string{"--allocate-node-cidrs=true", "--cluster-cidr=" + n.clusterCIDR.String(), "--node-cidr-mask-size=24"}
	}
	args := []string{
		"--kubeconfig=" + n.Kubeconfig,
		"--controllers=" + controllers,
		"--service-account-private-key-file=" + n.certs.saKey,
		"--root-ca-file=" + n.certs.caCert,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		// React to pod and DaemonSet changes at once (the tests wait on
		// them); the defaults batch for big clusters.
		"--concurrent-daemonset-syncs=2",
	}
	args = append(args, ipam...)
	p, err := startProc(n.launcher, "kube-controller-manager", b.controllerManager, args,
		filepath.Join(dir, "kube-controller-manager.log"))
	if err == nil {
		n.components = append(n.components, p)
	}
	return err
}

func (n *Node) startScheduler(_ context.Context, b nodeBins, dir string) error {
	args := []string{
		"--kubeconfig=" + n.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
	}
	p, err := startProc(n.launcher, "kube-scheduler", b.scheduler, args, filepath.Join(dir, "kube-scheduler.log"))
	if err == nil {
		n.components = append(n.components, p)
	}
	return err
}
