// Command istio-cni is the CNI plugin the runtime runs, chained after the
// node's primary CNI: a shim (pkg/shim) that hands ADD to the node agent,
// answers VERSION, and execs istio-cni-full, installed beside it, for
// everything else.
package main

import (
	"os"

	"istio-cni.local/istio-cni/pkg/shim"
)

func main() {
	os.Exit(shim.Run(shim.Process()))
}
