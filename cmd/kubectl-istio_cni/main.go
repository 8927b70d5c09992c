// Command kubectl-istio_cni is istio-cni's kubectl plugin: on the PATH,
// `kubectl istio-cni why|check|logs|version`. It asks the node agent on
// the right node (kubectlplugin).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"istio-cni.local/istio-cni/cmd/kubectl-istio_cni/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlplugin.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
