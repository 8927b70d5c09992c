// Package integration drives the built istio-cni binary the way a container
// runtime does (libcni, chained after the bridge and host-local plugins, in
// real network namespaces) against a real kube-apiserver, and sends real
// traffic through the rules it programs.
package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/podsim"
)

// env is shared by every test in the package: starting an API server and
// building the binaries once keeps the suite short.
var env struct {
	binDir     string
	api        *cluster.APIServer
	kubeconfig string // the plugin's, with PluginToken
	dir        string
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("integration: skipped, needs root (network namespaces, iptables)")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "istio-cni-integration-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	// The test proxy runs as the proxy's uid and must reach its binary.
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	env.dir = dir
	env.binDir = filepath.Join(dir, "bin")
	if err := podsim.Build(env.binDir); err != nil {
		return 0, err
	}
	apiDir := filepath.Join(dir, "api")
	if err := os.Mkdir(apiDir, 0o700); err != nil {
		return 0, err
	}
	env.api, err = cluster.StartAPIServer(context.Background(), cluster.Options{Dir: apiDir})
	if err != nil {
		return 0, err
	}
	defer env.api.Stop()
	env.kubeconfig = filepath.Join(dir, "istio-cni-kubeconfig")
	if err := env.api.Kubeconfig(env.kubeconfig, cluster.PluginToken); err != nil {
		return 0, err
	}
	code := m.Run()
	if code != 0 {
		for _, log := range []string{"kube-apiserver.log"} {
			if b, err := exec.Command("tail", "-n", "20", filepath.Join(apiDir, log)).Output(); err == nil {
				fmt.Fprintf(os.Stderr, "--- tail of %s ---\n%s", log, b)
			}
		}
	}
	return code, nil
}
