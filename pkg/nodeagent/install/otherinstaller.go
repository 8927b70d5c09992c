package install

import (
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/chain"
)

// noticeOtherInstaller says once, when upstream Istio's installer has an
// entry in a config here, that both are installed. Nothing waits on it:
// this installer's binaries, kubeconfig and type are under names upstream
// never writes or removes, its config sorts first (the runtime runs its
// plugin), and where upstream's installer put its entry into that config
// the entry stays, after ours (chain.Owned). The switch finishes when one
// of the two is uninstalled (docs/migration.md).
func (in *Installer) noticeOtherInstaller(cd chain.Dir) {
	file := otherInstaller(cd)
	was := in.files.other
	in.files.other = file
	switch file {
	case was:
	case "":
		in.log.Info("upstream Istio's istio-cni entry is gone; this installer alone chains istio-cni here", "was", was)
	default:
		in.log.Info("upstream Istio's istio-cni is installed too; this one chains its own plugin, under names upstream's never touches",
			"file", filepath.Join(in.cfg.CNINetDir, file), "owned", in.files.owned,
			"finish", "uninstall one of the two (docs/migration.md)")
		if in.deps.Notify != nil {
			in.deps.Notify.OtherInstaller(file)
		}
	}
}

// otherInstaller returns a config file holding an istio-cni entry that
// upstream Istio's installer wrote, or "".
func otherInstaller(cd chain.Dir) string {
	for _, f := range cd.Files {
		if f.Data != nil && chain.UpstreamEntry(f.Data) {
			return f.Name
		}
	}
	return ""
}
