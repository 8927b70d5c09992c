// Command istio-cni-apilookup reads one pod from the Kubernetes API for
// the istio-cni plugin, which runs it only when the node agent does not
// answer (pkg/kube/apilookup). It is installed beside the plugin.
package main

import (
	"fmt"
	"os"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/kube/apiclient"
	"istio-cni.local/istio-cni/pkg/kube/apilookup"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintf(os.Stderr, "%s takes no arguments: the istio-cni plugin sends its request as JSON on stdin\n", apilookup.Binary)
		os.Exit(2)
	}
	os.Exit(apilookup.Serve(os.Stdin, os.Stdout, os.Stderr, func(kubeconfig string, t kube.Timeouts) (apilookup.PodReader, error) {
		return apiclient.NewClient(kubeconfig, t)
	}))
}
