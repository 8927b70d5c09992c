package plugin

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Status reports whether ADD can work on this node (CNI 1.1.0): the
// kubeconfig the installer writes loads (through the API lookup helper,
// which must be in place) and the IPv4 iptables programs
// exist (IPv6 ones are needed only by dual-stack pods, whose ADD says so).
// Otherwise it answers 50 (plugin not available) so the runtime stops
// creating pods here instead of failing each one.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := parseConfig(args.StdinData)
	if err != nil {
		return err
	}
	getter, err := p.deps.NewPodGetter(conf)
	if err == nil {
		err = getter.Check(context.Background())
	}
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("the API lookup cannot work: %v", err), "")
	}
	cmds := conf.parsed.Backend.CommandsFor(iptables.IPv4)
	for _, name := range []string{cmds.Restore, cmds.Save} {
		if _, err := release.LookPath(name); err != nil {
			return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
		}
	}
	return nil
}

// GC has nothing to collect (CNI 1.1.0): the rules live in a pod's network
// namespace, which the runtime destroys with the sandbox, and the records
// of what ADD did (records_dir) are DEL's to remove and the node agent's to
// prune for pods gone from the node.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	_, err := parseConfig(args.StdinData)
	return err
}
