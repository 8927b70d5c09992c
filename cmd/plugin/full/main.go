// Command istio-cni-full is the CNI plugin that sends a meshed pod's
// traffic through its Istio sidecar, doing every verb itself. The shim the
// runtime runs as istio-cni (cmd/plugin) execs it for every verb but the
// ADDs the node agent runs and VERSION, whose answer it gives itself.
// Run without CNI_COMMAND, it prints its build (pkg/version).
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/plugin"
	"istio-cni.local/istio-cni/pkg/version"
)

func main() {
	skel.PluginMainFuncs(plugin.New().Funcs(), cniversion.All, version.Line("istio-cni"))
}
