// Command istio-cni-full is the CNI plugin that sends a meshed pod's
// traffic through its Istio sidecar, doing every verb itself. The shim the
// runtime runs as istio-cni (cmd/plugin) execs it for every verb but the
// ADDs the node agent runs and VERSION, whose answer it gives itself.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/plugin"
)

// Version is set at build time.
var Version = "dev"

func main() {
	skel.PluginMainFuncs(plugin.New().Funcs(), version.All, "istio-cni "+Version)
}
