// Command install-cni is the istio-cni DaemonSet's process on every node
// (pkg/nodeagent): it installs the plugin, its kubeconfig and the chained
// conflist and keeps them in place, audits the node's meshed pods, keeps
// the node's startup taint in step, and removes the files when istio-cni is
// uninstalled.
//
//	install-cni [flags]                  the agent (flags: install-cni --help)
//	install-cni inspect NAMESPACE/NAME   why a pod is (not) redirected
//	install-cni uninstall [flags]        remove istio-cni from a node whose agent is gone
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/nodeagent"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "install-cni:", err)
		os.Exit(1)
	}
	args := os.Args[1:]
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "inspect":
		os.Exit(nodeagent.Inspect(args[1:], os.Getenv, os.Stdout, os.Stderr))
	case "uninstall":
		os.Exit(nodeagent.Uninstall(args[1:], os.Getenv, filepath.Dir(self), os.Stdout, os.Stderr))
	}
	os.Exit(nodeagent.Main(args, os.Getenv, filepath.Dir(self), os.Stderr))
}
