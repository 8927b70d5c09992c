// Command istio-cni is the CNI plugin the runtime runs, chained after the
// node's primary CNI: a shim (pkg/shim) that hands ADD to the node agent,
// answers VERSION, and execs istio-cni-full, installed beside it, for
// everything else.
//
// Go's runtime would re-read the cgroup's CPU limit for GOMAXPROCS from a
// goroutine and from sysmon's first pass; a process that lives a few
// milliseconds never uses the answer, and starting them costs every pod
// start a few page faults (BENCHMARKS.md).
//
//go:debug updatemaxprocs=0
package main

import (
	"os"

	"istio-cni.local/istio-cni/pkg/shim"
)

func main() {
	os.Exit(shim.Run(shim.Process()))
}
