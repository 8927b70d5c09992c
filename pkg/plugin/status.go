package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"
)

// Status answers the runtime's STATUS (CNI 1.1.0). containerd asks it each
// time kubelet asks for the runtime's status, and any error makes the
// node's network NotReady: kubelet then starts no pod there, plain or
// meshed, and the node's NoExecute taint evicts what runs. So it fails
// only for what fails a plain pod's ADD as well: a config that does not
// parse (and, in the shim, no full plugin to exec). What only injected
// pods need (the kubeconfig, which is on a tmpfs and gone after a reboot
// until the agent writes it again; the API lookup helper; the API; the
// iptables programs) is never asked here: an injected pod whose ADD lacks
// it fails closed at its sandbox, saying why, and the agent's readiness
// says it while the agent runs.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	_, err := parseConfig(args.StdinData)
	return err
}

// GC has nothing to collect (CNI 1.1.0): the rules live in a pod's network
// namespace, which the runtime destroys with the sandbox, and the records
// of what ADD did (records_dir) are DEL's to remove and the node agent's to
// prune for pods gone from the node. Like STATUS, it fails only on a
// config that does not parse.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	_, err := parseConfig(args.StdinData)
	return err
}
