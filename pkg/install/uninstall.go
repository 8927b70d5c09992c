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

// Uninstall removes what the installer put on the node: the chained
// conflist first (or our entry from the primary's file, inplace), so no new
// sandbox is sent to a plugin that is about to go, then the kubeconfig and
// the binary.
func (in *Installer) Uninstall() error {
	var errs []error
	remove := func(dir string, names ...string) {
		_, err := inDir(dir, 0o755, func(d *fsutil.Dir) (struct{}, error) {
			var errs []error
			for _, n := range names {
				errs = append(errs, d.Remove(n))
			}
			return struct{}{}, errors.Join(errs...)
		})
		errs = append(errs, err)
	}
	if in.cfg.Mode == Inplace {
		errs = append(errs, in.removeInplaceEntry())
	} else {
		remove(in.cfg.CNINetDir, in.ownedNames()...)
	}
	remove(in.cfg.KubeconfigDir, KubeconfigName)
	remove(in.cfg.CNIBinDir, PluginBinary)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uninstalling: %w", err)
	}
	in.log.Info("uninstalled", "conflist", in.owned, "kubeconfig", KubeconfigName, "binary", PluginBinary)
	return nil
}

func (in *Installer) removeInplaceEntry() error {
	_, err := inDir(in.cfg.CNINetDir, 0o755, func(d *fsutil.Dir) (bool, error) {
		p, err := chain.FindPrimary(d.Path(), "")
		if err != nil {
			return false, err
		}
		data, err := chain.WithoutEntry(p.Data)
		if err != nil {
			return false, err
		}
		return d.WriteFile(p.Name, data, p.Mode.Perm())
	})
	return err
}

// DaemonSetGone is the UninstallCheck against the API: the DaemonSet is gone
// or has a deletion timestamp. A rolling update or a pod restart leaves it
// in place; `kubectl delete` removes it (background deletion, the default)
// or marks it (foreground) before its pods get SIGTERM.
func DaemonSetGone(cfg *rest.Config, namespace, name string) (UninstallCheck, error) {
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
