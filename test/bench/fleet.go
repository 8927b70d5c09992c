package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// The agent's and the plugin's API users, as the DaemonSet runs them: the
// audit log counts their requests.
const (
	agentUser  = "system:serviceaccount:istio-cni:istio-cni"
	pluginUser = "system:serviceaccount:istio-cni:istio-cni-plugin"
)

// fleetSample is one fleet size's figures.
type fleetSample struct {
	nodes int
	// idle: per agent, over the idle window.
	idleRPS, idleCPU float64 // requests a second; CPU share of one core
	watches          float64 // watches open at the window's end
	idleRSS          float64 // MB
	// bursts, by pods per node.
	bursts []burstSample
	// pluginRequests is what the plugin asked the API server itself, by
	// verb and resource (the agent answers its lookups within its budget).
	pluginRequests map[string]int
}

type burstSample struct {
	podsPerNode                 int
	requestsPerPod, cpuMSPerPod float64 // per agent
	rss                         float64 // MB, per agent, once the pods run
}

// fleetBench measures what istio-cni's agents cost the control plane and
// their nodes on fleets of 1 to maxNodes nodes (cluster.StartFleet): the
// API requests and watches per agent (from the API server's audit log of
// their service account), each agent's CPU and RSS idle and while meshed
// pods start on every node, podsPerNode of them and then podsPerNode2.
func fleetBench(maxNodes, podsPerNode, podsPerNode2 int, idle time.Duration) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (containerd, kubelet, namespaces)")
	}
	if maxNodes < 1 || maxNodes > 9 {
		return fmt.Errorf("-fleet %d: want 1 to 9 nodes", maxNodes)
	}
	if podsPerNode < 1 || podsPerNode2 <= podsPerNode || podsPerNode2 > 100 {
		return fmt.Errorf("-fleet-pods %d,%d: want two counts, rising, at most 100 (kubelet's 110 less the agent and the server)", podsPerNode, podsPerNode2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "istio-cni-bench-fleet-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return err
	}
	var samples []fleetSample
	for n := 1; n <= maxNodes; n++ {
		s, err := measureFleet(ctx, filepath.Join(dir, fmt.Sprint(n)), images, n, []int{podsPerNode, podsPerNode2}, idle)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		samples = append(samples, s)
		fmt.Fprintf(os.Stderr, "bench: %d nodes measured\n", n)
	}
	printFleet(samples, idle)
	return nil
}

func measureFleet(ctx context.Context, dir string, images []string, n int, podCounts []int, idle time.Duration) (s fleetSample, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return s, err
	}
	f, err := cluster.StartFleet(ctx, cluster.FleetOptions{Dir: dir, Nodes: n, AuditUsers: []string{agentUser, pluginUser}})
	if err != nil {
		return s, err
	}
	defer func() { err = errors.Join(err, f.Stop()) }()
	for _, node := range f.Nodes {
		if err := node.ImportImages(ctx, images...); err != nil {
			return s, err
		}
	}
	if out, err := f.Install(ctx, filepath.Join(dir, "overlay"), false); err != nil {
		return s, fmt.Errorf("%w\n%s", err, out)
	}
	pids, err := agentPIDs(ctx, f)
	if err != nil {
		return s, err
	}
	// Past the agents' start (informers listing, the first audit pass).
	time.Sleep(10 * time.Second)
	s.nodes = n
	from := len(mustAudit(dir))
	cpu0 := cpuTicks(pids)
	time.Sleep(idle)
	events := mustAudit(dir)
	s.idleCPU = float64(cpuTicks(pids)-cpu0) / 100 / idle.Seconds() / float64(n)
	window := events[from:]
	s.idleRPS = float64(requests(window, agentUser)) / idle.Seconds() / float64(n)
	s.watches = float64(openWatches(events, agentUser)) / float64(n)
	s.idleRSS = rssMB(pids) / float64(n)
	server := cluster.PodSpec{Namespace: "bench", Name: "server", Server: true, NodeName: f.Nodes[n-1].Name}
	if err := f.Nodes[n-1].CreatePod(ctx, server.JSON()); err != nil {
		return s, err
	}
	sp, err := f.Nodes[n-1].WaitRunning(ctx, "bench", "server")
	if err != nil {
		return s, err
	}
	target := fmt.Sprintf("%s:%d", sp.Status.PodIP, cluster.ServerPort)
	running := 0
	for _, p := range podCounts {
		from := len(mustAudit(dir))
		cpu0 := cpuTicks(pids)
		if err := startMeshed(ctx, f, target, running, p); err != nil {
			return s, err
		}
		added := (p - running) * n
		running = p
		events := mustAudit(dir)
		s.bursts = append(s.bursts, burstSample{
			podsPerNode:    p,
			requestsPerPod: float64(requests(events[from:], agentUser)) / float64(added),
			cpuMSPerPod:    float64(cpuTicks(pids)-cpu0) * 10 / float64(added),
			rss:            rssMB(pids) / float64(n),
		})
	}
	s.pluginRequests = map[string]int{}
	for _, e := range mustAudit(dir) {
		if e.User.Username == pluginUser && e.Stage == "ResponseComplete" {
			s.pluginRequests[e.Verb+" "+e.ObjectRef.Resource]++
		}
	}
	return s, nil
}

// startMeshed starts meshed pods on every node at once, numbered from
// `from` to `to` on each, and waits for all to run.
func startMeshed(ctx context.Context, f *cluster.Fleet, target string, from, to int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(f.Nodes)*(to-from))
	for _, node := range f.Nodes {
		for i := from; i < to; i++ {
			spec := cluster.PodSpec{Namespace: "bench", Name: fmt.Sprintf("%s-m%03d", node.Name, i), Target: target, Sidecar: true, NodeName: node.Name}
			if err := node.CreatePod(ctx, spec.JSON()); err != nil {
				return err
			}
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				defer cancel()
				if _, err := node.WaitRunning(wctx, spec.Namespace, spec.Name); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// agentPIDs finds every node's agent process (its container's init).
func agentPIDs(ctx context.Context, f *cluster.Fleet) ([]int, error) {
	var pids []int
	for _, node := range f.Nodes {
		pid, err := node.ContainerPID(ctx, "istio-cni", "install-cni")
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", node.Name, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// cpuTicks sums the processes' user and system time, in clock ticks
// (USER_HZ, 100 a second).
func cpuTicks(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			sum += u + st
		}
	}
	return sum
}

func rssMB(pids []int) float64 {
	var kib int64
	for _, pid := range pids {
		kib += procStatus(pid)["VmRSS:"]
	}
	return float64(kib) / 1024
}

func mustAudit(dir string) []cluster.AuditEvent {
	events, _ := cluster.ReadAuditLog(dir)
	return events
}

// requests counts the user's answered requests, watches not included.
func requests(events []cluster.AuditEvent, user string) int {
	n := 0
	for _, e := range events {
		if e.User.Username == user && e.Stage == "ResponseComplete" && e.Verb != "watch" {
			n++
		}
	}
	return n
}

// openWatches is the user's watches started and not ended.
func openWatches(events []cluster.AuditEvent, user string) int {
	n := 0
	for _, e := range events {
		if e.User.Username != user || e.Verb != "watch" {
			continue
		}
		switch e.Stage {
		case "ResponseStarted":
			n++
		case "ResponseComplete":
			n--
		}
	}
	return n
}

func printFleet(samples []fleetSample, idle time.Duration) {
	fmt.Printf("\n## The agents on a fleet (cluster.StartFleet; per agent; idle over %s)\n\n", idle)
	header := "| nodes | API requests/s idle | watches open | CPU idle | RSS idle |"
	sep := "|---|---|---|---|---|"
	for _, b := range samples[0].bursts {
		header += fmt.Sprintf(" %d meshed pods a node: requests a pod / CPU ms a pod / RSS |", b.podsPerNode)
		sep += "---|"
	}
	fmt.Println(header)
	fmt.Println(sep)
	for _, s := range samples {
		line := fmt.Sprintf("| %d | %.3f | %.1f | %.2f%% | %.1f MB |", s.nodes, s.idleRPS, s.watches, 100*s.idleCPU, s.idleRSS)
		for _, b := range s.bursts {
			line += fmt.Sprintf(" %.2f / %.1f / %.1f MB |", b.requestsPerPod, b.cpuMSPerPod, b.rss)
		}
		fmt.Println(line)
	}
	last := samples[len(samples)-1]
	b1, b2 := last.bursts[0], last.bursts[len(last.bursts)-1]
	perPod := (b2.rss - b1.rss) / float64(b2.podsPerNode-b1.podsPerNode)
	at110 := b2.rss + perPod*float64(110-b2.podsPerNode)
	fmt.Printf("\nThe plugins' own requests to the API server on the %d-node fleet, by verb and resource: %v (a lookup the agent did not answer within its 50 ms budget).\n", last.nodes, last.pluginRequests)
	fmt.Printf("At 1,000 nodes x 110 pods, from %d nodes: idle, %.0f API requests/s and %.0f open watches on the API server from the agents; each agent about %.1f MB RSS (%.2f MB a pod past %d pods a node).\n",
		last.nodes, last.idleRPS*1000, last.watches*1000, at110, perPod, b2.podsPerNode)
}
