package plugin

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/xtables"
)

// Status reports whether ADD can work on this node (CNI 1.1.0): the
// kubeconfig the installer writes is readable and the iptables programs
// exist. Otherwise it answers 50 (plugin not available) so the runtime stops
// creating pods here instead of failing each one.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	f, err := os.Open(conf.Kubeconfig)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("kubeconfig: %v", err), "")
	}
	_ = f.Close()
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		cmds := conf.backend.CommandsFor(fam)
		for _, name := range []string{cmds.Restore, cmds.Save} {
			if _, err := xtables.LookPath(name); err != nil {
				return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
			}
		}
	}
	return nil
}

// GC has nothing to collect (CNI 1.1.0): the plugin keeps no state outside a
// pod's network namespace, and the runtime destroys that with the sandbox.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	_, err := parseConfig(args.StdinData)
	return err
}
