// Package e2e proves istio-cni on a real Kubernetes node on this machine:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// and kubelet, with a bridge primary CNI, the product installed with
// `make image`, `ctr images import` and `kubectl apply -k` of an overlay of
// deployments/. The tests run in order; the last one uninstalls.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// env is the node every test uses.
var env struct {
	node    *cluster.Node
	proxy   *apiProxy
	overlay string
	health  int // the installer's /healthz and /readyz port
	metrics int // the agent's /metrics port
	// installCNI is the agent's binary as built for the image, for
	// inspect run on the node.
	installCNI string
	primary    []byte
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
		} else {
			fmt.Fprintln(os.Stderr, "e2e: logs kept in", dir)
		}
	}()
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
	stopNode := sync.OnceValue(node.Stop)
	defer func() {
		if code != 0 || err != nil {
			fmt.Fprintln(os.Stderr, node.Logs(40))
		}
		if stopErr := stopNode(); stopErr != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the node:", stopErr)
			code = 1
		}
	}()
	defer stopOnAbort(stopNode)()
	if err := node.ImportImages(ctx, images...); err != nil {
		return 1, err
	}
	if env.primary, err = os.ReadFile(node.PrimaryConfig); err != nil {
		return 1, err
	}
	if env.proxy, err = newAPIProxy(fmt.Sprintf("127.0.0.1:%d", node.APIPort())); err != nil {
		return 1, err
	}
	defer env.proxy.down()
	env.overlay = filepath.Join(dir, "overlay")
	overlay, out, err := node.Install(ctx, env.overlay, env.proxy.port())
	fmt.Print(out)
	if err != nil {
		return 1, err
	}
	env.health, env.metrics = overlay.HealthPort, overlay.MetricsPort
	env.installCNI = filepath.Join(filepath.Dir(images[1]), "bin", "install-cni")
	return m.Run(), nil
}

// stopOnAbort stops the node before the process dies without running
// deferred calls: on SIGINT or SIGTERM, and shortly before `go test
// -timeout` would panic. Pdeathsig ends the node's direct children anyway,
// but not containerd's shims and their containers, which outlive it by
// design. It returns a function that disarms it.
func stopOnAbort(stop func() error) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var expire <-chan time.Time
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 2*time.Minute {
			// go test's alarm starts in m.Run, after this: ours fires first.
			expire = time.After(d - time.Minute)
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "e2e: %v: stopping the node\n", s)
		case <-expire:
			fmt.Fprintln(os.Stderr, "e2e: the test timeout is near: stopping the node")
		case <-done:
			return
		}
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the node:", err)
		}
		os.Exit(1)
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}
