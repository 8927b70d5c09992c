// Package multinode proves istio-cni on a cluster, not one node: a fleet of
// nodes on this machine (cluster.StartFleet), each a containerd and a
// kubelet in network, mount and UTS namespaces of its own, joined to one
// control plane. istio-cni is installed as a user does, `kubectl apply -k`
// of deployments/ with no hostPath changed. The last node's iptables is
// legacy, the others' nf_tables. `make e2e-multinode` runs these
// tests; NODES sets the node count (default 3).
package multinode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// env is the fleet every test uses.
var env struct {
	fleet *cluster.Fleet
	dir   string
	// beforeFlannel is what each node showed with istio-cni installed
	// and no primary CNI yet (installBeforeFlannel).
	beforeFlannel map[string]nodeWithoutPrimary
	// installCNI is `make build`'s install-cni, for inspect on a node.
	installCNI string
	// images are the node images' tarballs (the test's, istio-cni's,
	// Flannel's), for a node that joins.
	images []string
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("multinode: needs root (containerd, kubelet, namespaces); skipping")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "multinode:", err)
		code = 1
	}
	os.Exit(code)
}

func nodeCount() (int, error) {
	s := os.Getenv("NODES")
	if s == "" {
		return 3, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 2 || n > 9 {
		return 0, fmt.Errorf("NODES=%q: want a node count from 2 to 9", s)
	}
	return n, nil
}

func run(m *testing.M) (code int, err error) {
	nodes, err := nodeCount()
	if err != nil {
		return 1, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "istio-cni-multinode-")
	if err != nil {
		return 1, err
	}
	env.dir = dir
	defer func() {
		if err == nil && code == 0 {
			_ = os.RemoveAll(dir)
			return
		}
		fmt.Fprintln(os.Stderr, "multinode: logs kept in", dir)
	}()
	var started atomic.Pointer[cluster.Fleet]
	disarm := cluster.AbortOnSignal(func() error {
		if f := started.Load(); f != nil {
			return f.Abort()
		}
		return nil
	}, cluster.TestDeadline())
	defer disarm()
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return 1, err
	}
	flannel, err := cluster.MakeFlannelImage(ctx)
	if err != nil {
		return 1, err
	}
	images = append(images, flannel)
	env.installCNI = filepath.Join(filepath.Dir(images[1]), "bin", "install-cni")
	env.images = images
	// A mixed fleet: the last node's iptables is legacy (an older node
	// pool's image), so every test here meets both backends.
	ipt := make([]cluster.Iptables, nodes)
	ipt[nodes-1] = cluster.LegacyIptables
	fleet, err := cluster.StartFleet(ctx, cluster.FleetOptions{Dir: dir, Nodes: nodes, Iptables: ipt, Primary: cluster.PrimaryFlannel, Started: func(f *cluster.Fleet) { started.Store(f) }})
	if err != nil {
		return 1, err
	}
	env.fleet = fleet
	stop := sync.OnceValue(fleet.Stop)
	defer func() {
		if code != 0 || err != nil {
			fmt.Fprintln(os.Stderr, fleet.Logs(30))
		}
		disarm()
		if stopErr := stop(); stopErr != nil {
			fmt.Fprintln(os.Stderr, "multinode: stopping the fleet:", stopErr)
			code = 1
		}
	}()
	for _, n := range fleet.Nodes {
		if err := n.ImportImages(ctx, images...); err != nil {
			return 1, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	out, err := fleet.Kubectl(ctx, "get", "nodes", "-o", "wide")
	fmt.Print(out)
	if err != nil {
		return 1, err
	}
	// istio-cni first, on nodes with no primary yet; what they showed
	// then is for TestIstioCNIBeforeFlannel.
	out, err = fleet.InstallBeforeFlannel(ctx, dir, true, func(ctx context.Context) (err error) {
		env.beforeFlannel, err = waitAgentsWithoutPrimary(ctx, fleet)
		return err
	})
	fmt.Print(out)
	if err != nil {
		return 1, err
	}
	return m.Run(), nil
}
