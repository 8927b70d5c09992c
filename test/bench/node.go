package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// nodeBench measures istio-cni on a real node: how long the installed
// DaemonSet takes to become ready, and what the plugin adds to a pod's
// start, as kubelet sees it (RunPodSandbox: the sandbox with its whole CNI
// chain) and as a user sees it (pod created → all containers ready).
func nodeBench(pods, burstPods int) (err error) {
	// kubelet runs at most 110 pods; the agent and the server take two.
	if pods < 2 || 2*pods+2 > 110 {
		return fmt.Errorf("-pods %d: want 2 to 54 (pods of each kind, within kubelet's 110)", pods)
	}
	if burstPods < 0 || burstPods+2 > 110 {
		return fmt.Errorf("-burst %d: want 0 (none) to 108 (kubelet's 110 less the agent and the server)", burstPods)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (containerd, kubelet)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "istio-cni-bench-node-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return err
	}
	start := time.Now()
	node, err := cluster.StartNode(ctx, cluster.NodeOptions{Dir: dir, Bridge: "icnibench0", Subnet: netip.MustParsePrefix("10.97.0.0/24")})
	if err != nil {
		return err
	}
	defer func() {
		if stopErr := node.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	nodeUp := time.Since(start)
	if err := node.ImportImages(ctx, images...); err != nil {
		return err
	}
	start = time.Now()
	overlay, _, err := node.Install(ctx, filepath.Join(dir, "overlay"), node.APIPort())
	if err != nil {
		return err
	}
	installed := time.Since(start)

	server := cluster.PodSpec{Namespace: "bench", Name: "server", Server: true}
	if err := node.CreatePod(ctx, server.JSON()); err != nil {
		return err
	}
	p, err := node.WaitRunning(ctx, "bench", "server")
	if err != nil {
		return err
	}
	target := fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)

	fmt.Printf("## Real node (`go run ./test/bench -node -pods %d`)\n\n", pods)
	fmt.Printf("node start (etcd → kubelet Ready): %s; `kubectl apply -k` → DaemonSet ready: %s\n\n",
		nodeUp.Round(10*time.Millisecond), installed.Round(10*time.Millisecond))
	// Plain and meshed pods alternate, so both kinds start under the same
	// (growing) load; each pod's RunPodSandbox time is the histogram's
	// growth across its start.
	kinds := []struct {
		label   string
		sidecar bool
	}{{"plain (bridge + portmap)", false}, {"meshed (bridge + portmap + istio-cni)", true}}
	sandbox := make([][]time.Duration, len(kinds))
	startup := make([][]time.Duration, len(kinds))
	for i := range pods * len(kinds) {
		k := i % len(kinds)
		s := cluster.PodSpec{Namespace: "bench", Name: fmt.Sprintf("p%d", i), Target: target, Sidecar: kinds[k].sidecar}
		before, err := sandboxSeconds(ctx, node)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := node.CreatePod(ctx, s.JSON()); err != nil {
			return err
		}
		if _, err := waitReadyFast(ctx, node, s); err != nil {
			return err
		}
		startup[k] = append(startup[k], time.Since(t0))
		after, err := sandboxSeconds(ctx, node)
		if err != nil {
			return err
		}
		if after.count-before.count == 1 { // else a retry or another pod's sandbox: no clean sample
			sandbox[k] = append(sandbox[k], time.Duration((after.sum-before.sum)*float64(time.Second)))
		}
	}
	fmt.Println("| pods | n | RunPodSandbox p50 (kubelet's CRI call) | p90 | created → ready p50 | p90 |")
	fmt.Println("|---|---|---|---|---|---|")
	for k, kind := range kinds {
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", kind.label, len(sandbox[k]),
			ms(pct(sandbox[k], 50)), ms(pct(sandbox[k], 90)), ms(pct(startup[k], 50)), ms(pct(startup[k], 90)))
	}
	if burstPods == 0 {
		return nil
	}
	// The node empties (but for the agent and the server) before it fills.
	if out, err := node.Kubectl(ctx, "-n", "bench", "delete", "pods", "-l", "app!=server", "--wait=true", "--timeout=5m"); err != nil {
		return fmt.Errorf("emptying the node: %w\n%s", err, out)
	}
	return burst(ctx, node, overlay, target, burstPods)
}

// waitReadyFast polls every 20 ms (WaitRunning's 200 ms is too coarse to
// time a pod start).
func waitReadyFast(ctx context.Context, node *cluster.Node, s cluster.PodSpec) (cluster.Pod, error) {
	for {
		p, found, err := node.GetPod(ctx, s.Namespace, s.Name)
		if err != nil {
			return p, err
		}
		if found && p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) > 0 && allReady(p) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("pod %s not ready: %w", s.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func allReady(p cluster.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

type histogram struct {
	sum   float64
	count int
}

// sandboxSeconds reads kubelet's histogram of its RunPodSandbox CRI calls
// (sandbox, pause container and the whole CNI ADD chain) from its
// /metrics. kubelet_run_podsandbox_duration_seconds would be the obvious
// one, but in 1.32 it timed almost nothing (microseconds per sandbox).
func sandboxSeconds(ctx context.Context, node *cluster.Node) (histogram, error) {
	// The kubelet's serving certificate is self-signed; this is the test
	// node's bridge on this machine.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec G402 -- the test node
	kubelet := netip.AddrPortFrom(node.NodeIP, uint16(node.KubeletPort))                                       // #nosec G115 -- a port
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+kubelet.String()+"/metrics", nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	var h histogram
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case `kubelet_runtime_operations_duration_seconds_sum{operation_type="run_podsandbox"}`:
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return h, err
			}
			h.sum += v
		case `kubelet_runtime_operations_duration_seconds_count{operation_type="run_podsandbox"}`:
			v, err := strconv.Atoi(value)
			if err != nil {
				return h, err
			}
			h.count += v
		}
	}
	return h, s.Err()
}

// pct is the p-th percentile (nearest rank) of d; it sorts d.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}
