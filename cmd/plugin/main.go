// Built without Go's GOMAXPROCS updater: the runtime would start a
// goroutine for it, and sysmon would re-read the cgroup's CPU limit from
// its first pass on, for a process that lives a few milliseconds
// (BENCHMARKS.md).
//
//go:debug updatemaxprocs=0

// Command istio-cni is the CNI plugin the runtime runs, chained after the
// node's primary CNI: a shim (pkg/shim) that hands ADD to the node agent,
// answers VERSION, and execs istio-cni-full, installed beside it, for
// everything else.
package main

import (
	"syscall"

	"istio-cni.local/istio-cni/pkg/shim"
)

func main() {
	syscall.Exit(shim.Run(shim.Process()))
}
