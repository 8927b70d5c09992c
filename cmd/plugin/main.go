// Command istio-cni is the CNI plugin, chained after the node's primary CNI,
// that sends a meshed pod's traffic through its Istio sidecar.
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
