package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// flannelBench measures pod starts on a fleet of nodes whose primary is
// Flannel (cluster.PrimaryFlannel), installed as `make test`'s fleet is:
// istio-cni first, then Flannel. Plain pods (flannel + portmap) and meshed
// ones (flannel + portmap + istio-cni) alternate, on each node in turn,
// so both kinds start under the same growing load; each is timed as a user
// sees it, created → all containers ready.
func flannelBench(nodes, pods int) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("needs root (containerd, kubelet, namespaces)")
	}
	if nodes < 1 || nodes > 9 {
		return fmt.Errorf("-flannel %d: want 1 to 9 nodes", nodes)
	}
	// kubelet runs at most 110 pods; Flannel's, istio-cni's and the
	// server take three.
	if pods < 2 || 2*pods > 107*nodes {
		return fmt.Errorf("-pods %d: want 2 to %d (pods of each kind, within kubelet's 110 a node)", pods, 107*nodes/2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "istio-cni-bench-flannel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return err
	}
	flannel, err := cluster.MakeFlannelImage(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	f, err := cluster.StartFleet(ctx, cluster.FleetOptions{Dir: dir, Nodes: nodes, Primary: cluster.PrimaryFlannel})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Stop()) }()
	for _, n := range f.Nodes {
		if err := n.ImportImages(ctx, append(images, flannel)...); err != nil {
			return err
		}
	}
	fleetUp := time.Since(start)
	start = time.Now()
	if out, err := f.InstallBeforeFlannel(ctx, dir, false, nil); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	installed := time.Since(start)
	last := f.Nodes[len(f.Nodes)-1]
	server := cluster.PodSpec{Namespace: "bench", Name: "server", Server: true, NodeName: last.Name}
	if err := last.CreatePod(ctx, server.JSON()); err != nil {
		return err
	}
	sp, err := last.WaitRunning(ctx, "bench", "server")
	if err != nil {
		return err
	}
	target := fmt.Sprintf("%s:%d", sp.Status.PodIP, cluster.ServerPort)

	fmt.Printf("## Flannel fleet (`go run ./test/bench -flannel %d -pods %d`)\n\n", nodes, pods)
	fmt.Printf("fleet start (control plane → %d nodes registered): %s; istio-cni then Flannel applied → every node Ready: %s\n\n",
		nodes, fleetUp.Round(10*time.Millisecond), installed.Round(10*time.Millisecond))
	kinds := []struct {
		label   string
		sidecar bool
	}{{"plain (flannel + portmap)", false}, {"meshed (flannel + portmap + istio-cni)", true}}
	startup := make([][]time.Duration, len(kinds))
	for i := range pods * len(kinds) {
		k := i % len(kinds)
		n := f.Nodes[(i/len(kinds))%len(f.Nodes)]
		s := cluster.PodSpec{Namespace: "bench", Name: fmt.Sprintf("p%d", i), Target: target, Sidecar: kinds[k].sidecar, NodeName: n.Name}
		t0 := time.Now()
		if err := n.CreatePod(ctx, s.JSON()); err != nil {
			return err
		}
		if _, err := waitReadyFast(ctx, n, s); err != nil {
			return err
		}
		startup[k] = append(startup[k], time.Since(t0))
	}
	fmt.Println("| pods | n | created → ready p50 | p90 | p99 |")
	fmt.Println("|---|---|---|---|---|")
	for k, kind := range kinds {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", kind.label, len(startup[k]),
			ms(pct(startup[k], 50)), ms(pct(startup[k], 90)), ms(pct(startup[k], 99)))
	}
	return nil
}
