package install

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
	"istio-cni.local/istio-cni/pkg/nodeagent/install/kubeconfig"
)

// Uninstall removes what the installer put on the node, and only that:
// first every config that chains our plugin (our conflists, under any name
// this or an earlier run used, and our entry in any other file), so no new
// sandbox is sent to a plugin that is about to go; then, RuntimeDrain
// later (a sandbox set up meanwhile runs the chain it loaded), the
// kubeconfig and the binary, when they are ours. Upstream Istio's entry,
// binary and kubeconfig stay (a conflist of ours it chained into keeps its
// entry): on a node it also manages (the switch back to it) its pods keep
// starting. If the configs cannot be cleaned, the binary and kubeconfig
// stay: a config that still names istio-cni with no binary would fail
// every pod.
func (in *Installer) Uninstall() error {
	chained, err := inDir(in.cfg.CNINetDir, 0o755, func(netd *hostfs.Dir) (bool, error) {
		cd, err := readConfDir(netd)
		if err != nil {
			return false, err
		}
		in.files.owned = ""
		chained := slices.ContainsFunc(cd.Files, func(f chain.File) bool {
			return in.isOurs(f) || (f.Data != nil && (chain.HasEntry(f.Data) || chain.HasLegacyEntry(f.Data)))
		})
		return chained, errors.Join(in.removeStaleOwned(netd, cd), in.removeEntries(netd, cd))
	})
	if err != nil {
		return fmt.Errorf("uninstalling: a CNI config may still chain istio-cni, so its binary and kubeconfig stay: %w", err)
	}
	if chained {
		// A sandbox whose setup began before the configs went still runs
		// ours.
		time.Sleep(in.cfg.RuntimeDrain)
	}
	for _, f := range []struct {
		dir, name string
		ours      func(*hostfs.Dir) bool
	}{
		{in.cfg.RunDir, KubeconfigName, ownedKubeconfig(KubeconfigName)},
		{in.cfg.RunDir, LegacyKubeconfigName, ownedKubeconfig(LegacyKubeconfigName)},
		{in.cfg.CNIBinDir, PluginBinary, in.ownedBinary(PluginBinary)},
		{in.cfg.CNIBinDir, LegacyPluginBinary, in.ownedBinary(LegacyPluginBinary)},
		{in.cfg.CNIBinDir, FullBinary, in.ownedBinary(FullBinary)},
		{in.cfg.CNIBinDir, LookupBinary, in.ownedBinary(LookupBinary)},
	} {
		if _, err := inDir(f.dir, 0o755, func(d *hostfs.Dir) (struct{}, error) {
			if !f.ours(d) {
				in.log.Info("leaving a file that is not ours", "file", filepath.Join(f.dir, f.name))
				return struct{}{}, nil
			}
			return struct{}{}, d.Remove(f.name)
		}); err != nil {
			return fmt.Errorf("uninstalling: %w", err)
		}
	}
	// What the plugin and the agent leave in the run directory: the log,
	// the sandboxes' records and the agent's sockets.
	if err := in.removeRunDirs(); err != nil {
		return fmt.Errorf("uninstalling: %w", err)
	}
	for _, name := range []string{ReportsSocket, PodsSocket} {
		sock := filepath.Join(in.cfg.RunDir, name)
		if fi, err := os.Lstat(sock); err == nil && fi.Mode().Type() == fs.ModeSocket {
			if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("uninstalling: %w", err)
			}
		}
	}
	in.log.Info("uninstalled")
	return nil
}

// ownedKubeconfig: the plugin's kubeconfig called name is one this
// installer built (upstream's, which an earlier release's shared the name
// of, has its own context name).
func ownedKubeconfig(name string) func(*hostfs.Dir) bool {
	return func(d *hostfs.Dir) bool {
		data, err := d.ReadFile(name)
		return err == nil && kubeconfig.Ours(data)
	}
}

// ownedBinary: the plugin binary (or its helper) is the image's own copy,
// or any build of this module (its Go build info names the main module),
// never upstream Istio's istio-cni, under the name an earlier release of
// ours used too.
func (in *Installer) ownedBinary(name string) func(*hostfs.Dir) bool {
	return func(d *hostfs.Dir) bool { return in.ownsBinary(d, name) }
}

func (in *Installer) ownsBinary(d *hostfs.Dir, name string) bool {
	if in.cfg.PluginSource != "" {
		if same, err := d.SameAs(name, filepath.Join(in.cfg.PluginSource, name)); err == nil && same {
			return true
		}
	}
	f, err := d.Open(name)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	theirs, err := buildinfo.Read(f)
	mine, ok := debug.ReadBuildInfo()
	return err == nil && ok && mine.Main.Path != "" && theirs.Main.Path == mine.Main.Path
}

// removeEntries strips our entry from every other config file (inplace
// mode's, or an old install's), and removes configs that are istio-cni's
// alone (the standalone config). Our own conflists are removeStaleOwned's.
func (in *Installer) removeEntries(netd *hostfs.Dir, cd chain.Dir) error {
	var errs []error
	for _, f := range cd.Files {
		if f.Data == nil || in.isOurs(f) || !chain.HasEntry(f.Data) {
			continue
		}
		out, err := chain.WithoutOurEntry(f.Data)
		if err == nil && bytes.Equal(out, f.Data) {
			continue // upstream's entry only: not ours to touch
		}
		switch {
		case errors.Is(err, chain.ErrOnlyEntry):
			// istio-cni's alone: the standalone config, or a list we left
			// with nothing else in it.
			err = netd.Remove(f.Name)
		case err == nil:
			_, err = netd.WriteFile(f.Name, out, f.Mode.Perm())
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
