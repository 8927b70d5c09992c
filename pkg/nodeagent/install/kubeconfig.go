package install

import (
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/kubeconfig"
)

// installKubeconfig writes the plugin's kubeconfig into RunDir, atomically
// and only when it differs (hostfs.WriteFile): the API server and CA from
// the installer's service account, and the plugin's minted token, or
// without a minter the installer's own.
func (in *Installer) installKubeconfig() outcome {
	// The run directory's other contents first, whatever the token: after
	// a reboot emptied /var/run the conflist on disk already names them.
	// Without them the plugin logs to the runtime only and records
	// nothing; its verbs still work, so this is not a failed step.
	if err := in.ensureRunDirs(); err != nil {
		in.log.Warn("the plugin's directories in the run directory", "error", err)
	}
	src, err := kubeconfig.FromServiceAccount(in.cfg.ServiceAccountDir,
		"KUBERNETES_SERVICE_HOST", in.cfg.APIHost, "KUBERNETES_SERVICE_PORT", in.cfg.APIPort)
	if err != nil {
		return outcome{problem: err}
	}
	if in.tokens != nil {
		// Without a valid minted token the file keeps the last one.
		if src.Token, err = in.token.current(in.now()); err != nil {
			return outcome{problem: err}
		}
	}
	data, err := kubeconfig.Build(src)
	if err != nil {
		return outcome{problem: err}
	}
	changed, err := inDir(in.cfg.RunDir, 0o700, func(d *hostfs.Dir) (bool, error) {
		return d.WriteFile(KubeconfigName, data, 0o600)
	})
	why := classifyWrite(changed, data, in.files.lastKubeconfig)
	if err == nil {
		in.files.lastKubeconfig = data
	}
	return outcome{why: why, problem: err}
}
