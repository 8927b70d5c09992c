package install

import (
	"bytes"
	"fmt"
	"slices"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// verifyFirst checks that the runtime would pick our conflist, the
// lexically first CNI config file (containerd stops at the first file even
// when it is invalid, so "first valid" is not enough), and that it is
// exactly what the current primary calls for.
func (in *Installer) verifyFirst() error {
	if !in.cfg.Chained {
		return in.verifyStandalone()
	}
	cd, err := ReadConfDir(in.cfg.CNINetDir)
	if err != nil {
		return err
	}
	files := cd.Names()
	owned := in.files.owned
	if !slices.Contains(files, owned) {
		in.metrics.Preempted.Set(0)
		return fmt.Errorf("our conflist %q is missing", owned)
	}
	if files[0] != owned {
		in.metrics.Preempted.Set(1)
		return fmt.Errorf("%s sorts before our %s", files[0], owned)
	}
	in.metrics.Preempted.Set(0)
	// Read through no symlink someone planted there.
	f, _ := cd.Lookup(owned)
	if f.Data == nil {
		return fmt.Errorf("our conflist %q is not a regular file", owned)
	}
	data := f.Data
	if in.cfg.Mode == Inplace {
		// The primary is the file itself, our entry inside it.
		return chain.Verify(data, &chain.Primary{Name: owned, Data: data}, in.entry(), in.upstreamBinaryHere(data))
	}
	p, err := in.findPrimary(cd)
	if err != nil {
		return err
	}
	return chain.Verify(data, p, in.entry(), in.upstreamBinaryHere(data))
}

// verifyStandalone checks that the standalone config is exactly ours.
// Which configs Multus delegates to is the NetworkAttachmentDefinition's
// business, not the file order's.
func (in *Installer) verifyStandalone() error {
	name := in.cfg.OwnedConfigName
	data, err := inDir(in.cfg.CNINetDir, 0o755, func(d *hostfs.Dir) ([]byte, error) { return d.ReadFile(name) })
	if err != nil {
		return err
	}
	want, err := chain.Standalone(in.entry())
	if err != nil {
		return err
	}
	if !bytes.Equal(data, want) {
		return fmt.Errorf("%s is not istio-cni's standalone config", name)
	}
	return nil
}
