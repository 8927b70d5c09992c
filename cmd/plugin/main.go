// Command istio-cni is the CNI plugin the runtime runs, chained after the
// node's primary CNI: a shim (pkg/shim) that hands ADD to the node agent,
// answers VERSION, and execs istio-cni-full, installed beside it, for
// everything else.
package main

import (
	"os"

	"istio-cni.local/istio-cni/pkg/shim"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	os.Exit(shim.Run(shim.Env{
		Getenv: os.Getenv, Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Exe: exe, Args: os.Args, Exec: shim.Exec,
		HandOff: func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error) {
			return handoff.Send(socket, req, netnsFD, handoff.Budget)
		},
	}))
}
