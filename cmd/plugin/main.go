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
	os.Exit(shim.Run(shim.Env{
		Getenv: os.Getenv, Environ: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Exe: exe, Args: os.Args, Exec: shim.Exec,
		HandOff: func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error) {
			return handoff.Send(socket, req, netnsFD, handoff.Budget)
		},
	}))
}

// exe is the shim's path, asked only when it execs the full plugin beside
// it: an ADD the agent runs never needs it.
func exe() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}
