package podsim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binaries are the programs a simulated node runs, built from this module
// and from the containernetworking/plugins module it requires.
var Binaries = map[string]string{
	"istio-cni-sidecar":   "istio-cni.local/istio-cni/cmd/plugin",
	"istio-cni-full":      "istio-cni.local/istio-cni/cmd/plugin/full",
	"istio-cni-apilookup": "istio-cni.local/istio-cni/cmd/plugin/apilookup",
	"install-cni":         "istio-cni.local/istio-cni/cmd/install-cni",
	"testproxy":           "istio-cni.local/istio-cni/test/testproxy",
	"bridge":              "github.com/containernetworking/plugins/plugins/main/bridge",
	"host-local":          "github.com/containernetworking/plugins/plugins/ipam/host-local",
}

// Build builds Binaries into dir, static, as nodes get them.
func Build(dir string) error {
	for name, pkg := range Binaries {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}
