package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// fleetDemo runs the demo on a fleet of n nodes (cluster.StartFleet): the
// product installed with deployments/ unmodified, a server on the last
// node, a meshed and a plain app on the first. A fleet's processes die
// with this one, so it runs in the foreground until interrupted, then
// takes everything down.
func fleetDemo(dir string, n int) (err error) {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	step("building the images: make image (install-cni + istio-cni) and the demo workload image")
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return err
	}
	step(fmt.Sprintf("starting %d nodes: one control plane; each node a containerd and a kubelet in network, mount and UTS namespaces of its own", n))
	fleet, err := cluster.StartFleet(ctx, cluster.FleetOptions{Dir: dir, Nodes: n})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fmt.Fprintln(os.Stderr, fleet.Logs(20))
		}
		step("stopping the fleet")
		err = errors.Join(err, fleet.Stop(), os.RemoveAll(dir))
	}()
	for _, node := range fleet.Nodes {
		if err := node.ImportImages(ctx, images...); err != nil {
			return err
		}
	}
	if err := show(ctx, fleet, "get", "nodes", "-o", "wide"); err != nil {
		return err
	}
	step("installing istio-cni on every node: kubectl apply -k (deployments/, its hostPaths unchanged, + the API server's address)")
	out, err := fleet.Install(ctx, filepath.Join(dir, "overlay"), false)
	fmt.Print(indent(out))
	if err != nil {
		return err
	}
	if err := show(ctx, fleet, "-n", "istio-cni", "get", "pods", "-o", "wide"); err != nil {
		return err
	}
	first, last := fleet.Nodes[0], fleet.Nodes[len(fleet.Nodes)-1]
	step(fmt.Sprintf("demo/server on %s; demo/meshed-app and demo/plain-app on %s", last.Name, first.Name))
	server := cluster.PodSpec{Namespace: "demo", Name: "server", Server: true, NodeName: last.Name}
	if err := last.CreatePod(ctx, server.JSON()); err != nil {
		return err
	}
	p, err := last.WaitRunning(ctx, "demo", "server")
	if err != nil {
		return err
	}
	target := fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)
	apps := []cluster.PodSpec{
		{Namespace: "demo", Name: "meshed-app", Target: target, Sidecar: true, NodeName: first.Name},
		{Namespace: "demo", Name: "plain-app", Target: target, NodeName: first.Name},
	}
	pods := map[string]cluster.Pod{}
	for _, s := range apps {
		if err := first.CreatePod(ctx, s.JSON()); err != nil {
			return err
		}
	}
	for _, s := range apps {
		if pods[s.Name], err = first.WaitRunning(ctx, s.Namespace, s.Name); err != nil {
			return err
		}
	}
	if err := show(ctx, fleet, "-n", "demo", "get", "pods", "-o", "wide"); err != nil {
		return err
	}
	step("the meshed pod's nat table on " + first.Name + " (nsenter --net=<its netns> iptables-save -t nat)")
	rules, err := first.IptablesSave(ctx, "demo", "meshed-app")
	if err != nil {
		return err
	}
	fmt.Print(indent(natTable(rules)))
	step("where each app's requests to demo/server (" + target + ", on " + last.Name + ") land")
	for _, s := range apps {
		line, err := lastReply(ctx, first, pods[s.Name])
		if err != nil {
			return err
		}
		verdict := "DIRECT to the server"
		if strings.HasPrefix(line, "proxy ") {
			verdict = "THROUGH THE PROXY"
		}
		fmt.Printf("   %-10s -> %s: %s\n", s.Name, verdict, line)
	}
	step("the fleet runs until you press Ctrl-C")
	fmt.Printf("   export KUBECONFIG=%s\n   kubectl get nodes,pods -A -o wide\n", fleet.Kubeconfig)
	wait, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-wait.Done()
	return nil
}

// show prints a kubectl command and its output.
func show(ctx context.Context, f *cluster.Fleet, args ...string) error {
	step("kubectl " + strings.Join(args, " "))
	out, err := f.Kubectl(ctx, args...)
	fmt.Print(indent(out))
	return err
}
