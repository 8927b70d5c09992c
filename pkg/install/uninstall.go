package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/fsutil"
)

// Uninstall removes what the installer put on the node: first every config
// that chains istio-cni (our conflists, under any name this or an earlier
// run used, and our entry in any other file), so no new sandbox is sent to
// a plugin that is about to go; then the kubeconfig and the binary. If the
// configs cannot be cleaned, the binary and kubeconfig stay: a config that
// still names istio-cni with no binary would fail every pod.
func (in *Installer) Uninstall() error {
	_, err := inDir(in.cfg.CNINetDir, 0o755, func(netd *fsutil.Dir) (struct{}, error) {
		in.files.owned = ""
		return struct{}{}, errors.Join(in.removeStaleOwned(netd), in.removeEntries(netd))
	})
	if err != nil {
		return fmt.Errorf("uninstalling: a CNI config may still chain istio-cni, so its binary and kubeconfig stay: %w", err)
	}
	for dir, name := range map[string]string{in.cfg.KubeconfigDir: KubeconfigName, in.cfg.CNIBinDir: PluginBinary} {
		if _, err := inDir(dir, 0o755, func(d *fsutil.Dir) (struct{}, error) { return struct{}{}, d.Remove(name) }); err != nil {
			return fmt.Errorf("uninstalling: %w", err)
		}
	}
	// What the plugin and the agent leave in the run directory: the
	// sandboxes' records and the agent's socket.
	if err := os.RemoveAll(filepath.Join(in.cfg.KubeconfigDir, RecordsDirName)); err != nil {
		return fmt.Errorf("uninstalling: %w", err)
	}
	for _, name := range []string{EventsSocket, PodsSocket} {
		sock := filepath.Join(in.cfg.KubeconfigDir, name)
		if fi, err := os.Lstat(sock); err == nil && fi.Mode().Type() == fs.ModeSocket {
			if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("uninstalling: %w", err)
			}
		}
	}
	in.log.Info("uninstalled")
	return nil
}

// removeEntries strips our entry from every other config file (inplace
// mode's, or an old install's), and removes configs that are istio-cni's
// alone (the standalone config).
func (in *Installer) removeEntries(netd *fsutil.Dir) error {
	files, err := chain.ConfigFiles(netd.Path())
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range files {
		data, err := netd.ReadFile(name)
		if err != nil || !chain.HasEntry(data) {
			continue
		}
		fi, err := netd.Lstat(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, err := chain.WithoutEntry(data)
		switch {
		case errors.Is(err, chain.ErrOnlyEntry):
			// istio-cni's alone: the standalone config, or a list we left
			// with nothing else in it.
			err = netd.Remove(name)
		case err == nil:
			_, err = netd.WriteFile(name, out, fi.Mode().Perm())
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ShutdownReason is the not-ready reason while the agent stops: the plugin
// stays installed, so it is no failure.
const ShutdownReason = "shutting down"

// shutdownBudget bounds the uninstall check: within the DaemonSet's
// 30-second grace period, with room for the removal itself.
const shutdownBudget = 20 * time.Second

// shutdown leaves everything in place unless the product is being removed.
func (in *Installer) shutdown() error {
	in.setReady(false, ShutdownReason)
	if in.deps.Uninstall == nil {
		in.log.Info("stopping; no uninstall check configured: leaving the plugin installed so pods keep starting")
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	uninstall, why, err := in.deps.Uninstall(ctx)
	switch {
	case err != nil:
		in.log.Warn("cannot tell uninstall from restart; leaving the plugin installed so pods keep starting (install-cni uninstall removes it)", "error", err.Error())
		return nil
	case !uninstall:
		in.log.Info("stopping, not uninstalling: leaving the plugin installed so pods keep starting", "why", why)
		return nil
	}
	in.log.Info("uninstalling", "why", why)
	return in.Uninstall()
}
