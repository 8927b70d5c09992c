package install

import (
	"fmt"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/chain"
)

// OtherInstallerReason starts the not-ready reason while another istio-cni
// installer (upstream Istio's) manages the node: no failure of this one,
// so it never taints the node.
const OtherInstallerReason = "another istio-cni installer manages this node"

// yieldToOtherInstaller reports whether upstream Istio's installer manages
// istio-cni here (its entry is in a config): then nothing is written, the
// agent is not ready, and it says so once, until that entry is gone.
func (in *Installer) yieldToOtherInstaller(cd chain.Dir) bool {
	file := otherInstaller(cd)
	was := in.files.other
	in.files.other = file
	switch {
	case file == "" && was != "":
		in.log.Info("the other istio-cni installer's entry is gone; installing", "was", was)
		return false
	case file == "":
		return false
	case was != file:
		in.log.Error(OtherInstallerReason+": not installing, not repairing",
			"file", filepath.Join(in.cfg.CNINetDir, file), "installer", "upstream Istio istio-cni (its entry carries cni_agent_run_dir or kubernetes)",
			"migrate", "uninstall it (helm uninstall istio-cni, or istioctl with components.cni.enabled=false); this agent installs once its entry is gone")
		if in.deps.Notify != nil {
			in.deps.Notify.OtherInstaller(file)
		}
	}
	in.setReady(false, fmt.Sprintf("%s (upstream Istio's entry in %s): uninstall it to migrate", OtherInstallerReason, file))
	return true
}

// otherInstaller returns a config file holding an istio-cni entry that
// upstream Istio's installer wrote, or "": while one is there, that
// installer manages istio-cni on this node (the same binary name and
// kubeconfig path), and this one touches nothing.
func otherInstaller(cd chain.Dir) string {
	for _, f := range cd.Files {
		if f.Data != nil && chain.UpstreamEntry(f.Data) {
			return f.Name
		}
	}
	return ""
}
