package install

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/rest"

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
		in.owned = ""
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
	in.log.Info("uninstalled")
	return nil
}

// removeEntries strips our entry from every other config file (inplace
// mode's, or an old install's).
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
		if err == nil {
			_, err = netd.WriteFile(name, out, fi.Mode().Perm())
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DaemonSetGone is the UninstallCheck against the API: the DaemonSet is gone
// or has a deletion timestamp. A rolling update or a pod restart leaves it
// in place; `kubectl delete` removes it (background deletion, the default)
// or marks it (foreground) before its pods get SIGTERM.
func DaemonSetGone(cfg *rest.Config, namespace, name string) (UninstallCheck, error) {
	if namespace == "" || name == "" {
		return nil, errors.New("the DaemonSet's namespace and name are needed to tell uninstall from restart")
	}
	client, err := appsv1.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (bool, error) {
		ds, err := client.DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading DaemonSet %s/%s: %w", namespace, name, err)
		}
		return ds.DeletionTimestamp != nil, nil
	}, nil
}
