// Command install-cni is the istio-cni DaemonSet's process on every node
// (pkg/nodeagent): it installs the plugin, its kubeconfig and the chained
// conflist and keeps them in place, audits the node's meshed pods, keeps
// the node's startup taint in step, and removes the files when istio-cni is
// uninstalled.
//
//	install-cni [flags]                  the agent (flags: install-cni --help)
//	install-cni inspect NAMESPACE/NAME   why a pod is (not) redirected
//	install-cni uninstall [flags]        remove istio-cni from a node whose agent is gone
//	install-cni version                  its build, one line (also --version)
package main

import (
	"os"

	"istio-cni.local/istio-cni/pkg/nodeagent"
)

func main() {
	os.Exit(nodeagent.Command(os.Args[1:], os.Getenv, os.Executable, os.Stdout, os.Stderr))
}
