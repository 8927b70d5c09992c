// Command istio-cni is the CNI plugin the runtime runs, chained after the
// node's primary CNI: a shim (pkg/shim) that hands ADD to the node agent,
// answers VERSION, and execs istio-cni-full, installed beside it, for
// everything else. It links no os: pkg/shim holds the process's side.
package main

import (
	"path"
	"syscall"

	"istio-cni.local/istio-cni/pkg/shim"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
)

func main() {
	syscall.Exit(shim.Run(shim.Env{
		Getenv: shim.Getenv, Environ: syscall.Environ(), Stdin: shim.FD(0), Stdout: shim.FD(1), Stderr: shim.FD(2),
		Exe: exe, Args: shim.Args, Exec: shim.Exec,
		HandOff: func(socket string, req handoff.Request, netnsFD int) (handoff.Response, error) {
			return handoff.Send(socket, req, netnsFD, handoff.Budget)
		},
	}))
}

// exe is the shim's path, asked only when it execs the full plugin beside
// it: an ADD the agent runs never needs it. Both ways read /proc; without
// it the shim looks on CNI_PATH (shim.Env.Exe).
func exe() string {
	if p := shim.Exe(); p != "" {
		return p
	}
	if args := shim.Args(); len(args) > 0 && path.IsAbs(args[0]) {
		return args[0]
	}
	return ""
}
