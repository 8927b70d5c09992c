package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// nodeBins are the node's programs: the Kubernetes ones built into
// _output/bin by `make kube-binaries`, the rest from Debian's packages.
type nodeBins struct {
	controllerManager, scheduler, kubelet string
	containerd, ctr                       string
}

func nodeBinaries() (nodeBins, error) {
	var b nodeBins
	root, err := repoRoot()
	if err != nil {
		return b, err
	}
	for _, k := range []struct {
		dst  *string
		name string
	}{{&b.controllerManager, "kube-controller-manager"}, {&b.scheduler, "kube-scheduler"}, {&b.kubelet, "kubelet"}} {
		*k.dst = filepath.Join(root, "_output", "bin", k.name)
		if err := checkExecutable(*k.dst); err != nil {
			return b, fmt.Errorf("%s: %w; run `make kube-binaries`", k.name, err)
		}
	}
	for _, d := range []struct {
		dst       *string
		name, pkg string
	}{{&b.containerd, "containerd", "containerd"}, {&b.ctr, "ctr", "containerd"}, {new(string), "runc", "runc"}} {
		if *d.dst, err = exec.LookPath(d.name); err != nil {
			return b, fmt.Errorf("%s: %w; install it with `apt-get install -y %s` (make deps)", d.name, err, d.pkg)
		}
	}
	return b, nil
}

// referencePluginDir holds the CNI reference plugins: Debian's
// containernetworking-plugins package installs them in /usr/lib/cni.
func referencePluginDir() (string, error) {
	const dir = "/usr/lib/cni"
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if err := checkExecutable(filepath.Join(dir, p)); err != nil {
			return "", fmt.Errorf("CNI reference plugin %s: %w; install containernetworking-plugins (make deps)", p, err)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// Kubectl returns the kubectl the tests and the demo run: the one `make
// kube-binaries` builds (the cluster's own version), not whatever is on
// $PATH.
func Kubectl() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "_output", "bin", "kubectl")
	if err := checkExecutable(path); err != nil {
		return "", fmt.Errorf("kubectl: %w; run `make kube-binaries`", err)
	}
	return path, nil
}

// Helm is the helm CLI `make helm` builds from the helm.sh/helm/v3 module.
func Helm() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "_output", "tools", "helm")
	if err := checkExecutable(path); err != nil {
		return "", fmt.Errorf("helm: %w; run `make helm`", err)
	}
	return path, nil
}
