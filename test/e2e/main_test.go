// Package e2e proves istio-cni on a real Kubernetes node on this machine:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// and kubelet, with a bridge primary CNI, the product installed with
// `make image`, `ctr images import` and `kubectl apply -k` of an overlay of
// deployments/. The tests run in order; the last one uninstalls.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// env is the node every test uses.
var env struct {
	node    *cluster.Node
	proxy   *apiProxy
	overlay string
	// agent is where the agent serves /readyz and /metrics.
	agent cluster.Overlay
	// installCNI is the agent's binary as built for the image, for
	// inspect run on the node.
	installCNI string
	// image is the product's image tarball (`make image`).
	image   string
	primary []byte
	dir     string
	// istioBuild is `make istio-binaries`, run while the first tests do
	// (realistio_test.go waits for it).
	istioBuild *istioBuild
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: needs root (containerd, kubelet, network namespaces); skipping")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "istio-cni-e2e-")
	if err != nil {
		return 1, err
	}
	defer func() {
		if err == nil && code == 0 {
			_ = os.RemoveAll(dir)
			return
		}
		if perr := cluster.PruneToLogs(dir); perr != nil {
			fmt.Fprintln(os.Stderr, "e2e:", perr)
		}
		fmt.Fprintln(os.Stderr, "e2e: logs kept in", dir)
	}()
	// Armed before anything starts: a node still starting when a signal or
	// the timeout comes is the next run's sweep's (cluster.SweepStale).
	var started atomic.Pointer[cluster.Node]
	buildCtx, stopBuild := context.WithCancel(context.Background())
	defer stopBuild()
	disarm := cluster.AbortOnSignal(func() error {
		stopBuild() // its compilers too: nothing of this run is left
		if n := started.Load(); n != nil {
			return n.Abort()
		}
		return nil
	}, cluster.TestDeadline())
	defer disarm()
	env.dir = dir
	env.istioBuild = startIstioBuild(buildCtx)
	// Images first: a build failure should not cost a node start.
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return 1, err
	}
	node, err := cluster.StartNode(ctx, cluster.NodeOptions{
		Dir: dir, Bridge: "icnie2e0", Subnet: netip.MustParsePrefix("10.99.0.0/24"),
	})
	if err != nil {
		return 1, err
	}
	env.node = node
	started.Store(node)
	stopNode := sync.OnceValue(node.Stop)
	defer func() {
		if code != 0 || err != nil {
			fmt.Fprintln(os.Stderr, node.Logs(40))
		}
		disarm() // Stop and Abort must not race
		if stopErr := stopNode(); stopErr != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the node:", stopErr)
			code = 1
		}
	}()
	if err := node.ImportImages(ctx, images...); err != nil {
		return 1, err
	}
	if env.primary, err = os.ReadFile(node.PrimaryConfig); err != nil {
		return 1, err
	}
	if env.proxy, err = newAPIProxy("127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", node.APIPort())); err != nil {
		return 1, err
	}
	defer env.proxy.down()
	env.overlay = filepath.Join(dir, "overlay")
	overlay, out, err := node.Install(ctx, env.overlay, env.proxy.port())
	fmt.Print(out)
	if err != nil {
		return 1, err
	}
	env.agent = overlay
	env.installCNI = filepath.Join(filepath.Dir(images[1]), "bin", "install-cni")
	env.image = images[1]
	return m.Run(), nil
}
