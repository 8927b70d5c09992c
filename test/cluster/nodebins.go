package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// nodeBins are the node's programs: Kubernetes' and containerd's (with
// its runc shim and ctr) built into _output/bin by `make kube-binaries`,
// runc from Debian's package.
type nodeBins struct {
	controllerManager, scheduler, kubelet string
	containerd, shim, ctr                 string
}

func nodeBinaries() (nodeBins, error) {
	var b nodeBins
	for _, k := range []struct {
		dst  *string
		name string
	}{
		{&b.controllerManager, "kube-controller-manager"}, {&b.scheduler, "kube-scheduler"}, {&b.kubelet, "kubelet"},
		{&b.containerd, "containerd"}, {&b.shim, "containerd-shim-runc-v2"}, {&b.ctr, "ctr"},
	} {
		path, err := builtBinary(k.name)
		if err != nil {
			return b, err
		}
		*k.dst = path
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return b, fmt.Errorf("runc: %w; install it with `apt-get install -y runc` (make deps)", err)
	}
	return b, nil
}

// builtBinary is the path of a node program `make kube-binaries` builds.
func builtBinary(name string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "_output", "bin", name)
	if err := checkExecutable(path); err != nil {
		return "", fmt.Errorf("%s: %w; run `make kube-binaries`", name, err)
	}
	return path, nil
}

// referencePlugins are the node's primary CNI.
var referencePlugins = []string{"bridge", "host-local", "portmap", "loopback"}

// referencePluginDir holds the CNI reference plugins `make cni-plugins`
// builds from the github.com/containernetworking/plugins version go.mod
// requires: they speak CNI 1.1.0 (STATUS, GC), which Debian's
// containernetworking-plugins (1.1.1) do not.
func referencePluginDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "_output", "tools", "cni-plugins")
	for _, p := range referencePlugins {
		if err := checkExecutable(filepath.Join(dir, p)); err != nil {
			return "", fmt.Errorf("CNI reference plugin %s: %w; run `make cni-plugins`", p, err)
		}
	}
	return dir, nil
}

// Kubectl returns the kubectl the tests and the demo run: the one `make
// kube-binaries` builds (the cluster's own version), not whatever is on
// $PATH.
func Kubectl() (string, error) { return builtBinary("kubectl") }

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
