// Command demo runs istio-cni on a real single-node Kubernetes on this
// machine and leaves it running: `make demo` starts it, `make demo-down`
// stops it.
//
// Up: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd and kubelet under _output/demo, a bridge primary CNI, then
// the product the way a user installs it (make image, ctr images import,
// kubectl apply -k of an overlay of deployments/), a server, a meshed app
// and an unmeshed one. It prints the DaemonSet, the meshed pod's nat table
// (nsenter + iptables-save) and where each app's requests land.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

func main() {
	down := flag.Bool("down", false, "stop the demo node and remove its directory")
	dir := flag.String("dir", "_output/demo", "the demo node's directory")
	nodes := flag.Int("nodes", 1, "nodes: above 1, a fleet (one control plane, each node in namespaces of its own) that runs until interrupted")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail(errors.New("needs root (containerd, kubelet, network namespaces)"))
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fail(err)
	}
	switch {
	case *down:
		err = stop(abs)
	case *nodes > 1:
		err = fleetDemo(abs+"-fleet", *nodes)
	case *nodes < 1:
		err = fmt.Errorf("-nodes (NODES) is %d; allowed: 1 (a single node, left running) or 2 to 9 (a fleet)", *nodes)
	default:
		err = up(abs)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

func step(s string) { fmt.Printf("\n== %s\n", s) }

// stop takes a running demo node down; no node is fine.
func stop(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, cluster.PIDFileName)); errors.Is(err, os.ErrNotExist) {
		fmt.Println("no demo node is running")
		return os.RemoveAll(dir)
	}
	step("stopping the demo node in " + dir)
	if err := cluster.StopNodeRecorded(dir); err != nil {
		return fmt.Errorf("%w (the directory is kept: run `make demo-down` again)", err)
	}
	fmt.Println("stopped; removing", dir)
	return os.RemoveAll(dir)
}

func up(dir string) (err error) {
	if err := stop(dir); err != nil { // a fresh node every time
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	step("building the images: make image (install-cni + istio-cni) and the demo workload image")
	images, err := cluster.BuildImages(ctx, dir)
	if err != nil {
		return err
	}
	fmt.Println("  ", images[1])

	step("starting the node: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet")
	node, err := cluster.StartNode(ctx, cluster.NodeOptions{
		Dir: dir, Bridge: "icnidemo0", Subnet: netip.MustParsePrefix("10.98.0.0/24"), Detach: true,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fmt.Fprintln(os.Stderr, node.Logs(20))
			err = errors.Join(err, node.Stop())
		}
	}()
	fmt.Printf("   node %s Ready; API server %s; primary CNI %s\n", node.Name, node.URL, node.PrimaryConfig)

	step("installing istio-cni: ctr images import, then kubectl apply -k (deployments/ + a local overlay)")
	if err := node.ImportImages(ctx, images...); err != nil {
		return err
	}
	if err := install(ctx, node, filepath.Join(dir, "overlay")); err != nil {
		return err
	}
	return showApps(ctx, node, filepath.Join(filepath.Dir(images[1]), "bin", "install-cni"))
}

func install(ctx context.Context, node *cluster.Node, overlay string) error {
	_, out, err := node.Install(ctx, overlay, node.APIPort())
	fmt.Print(indent(out))
	if err != nil {
		return err
	}
	step("the DaemonSet (kubectl -n istio-cni get daemonset,pods)")
	out, err = node.Kubectl(ctx, "-n", "istio-cni", "get", "daemonset,pods", "-o", "wide")
	fmt.Print(indent(out))
	return err
}

func showApps(ctx context.Context, node *cluster.Node, installCNI string) error {
	step("starting demo/server, demo/meshed-app (with an istio-proxy sidecar) and demo/plain-app (without)")
	server := cluster.PodSpec{Namespace: "demo", Name: "server", Server: true}
	if err := node.CreatePod(ctx, server.JSON()); err != nil {
		return err
	}
	p, err := node.WaitRunning(ctx, "demo", "server")
	if err != nil {
		return err
	}
	target := fmt.Sprintf("%s:%d", p.Status.PodIP, cluster.ServerPort)
	apps := []cluster.PodSpec{
		{Namespace: "demo", Name: "meshed-app", Target: target, Sidecar: true},
		{Namespace: "demo", Name: "plain-app", Target: target},
	}
	pods := map[string]cluster.Pod{}
	for _, s := range apps {
		if err := node.CreatePod(ctx, s.JSON()); err != nil {
			return err
		}
	}
	for _, s := range apps {
		if pods[s.Name], err = node.WaitRunning(ctx, s.Namespace, s.Name); err != nil {
			return err
		}
	}
	out, err := node.Kubectl(ctx, "-n", "demo", "get", "pods", "-o", "wide")
	if err != nil {
		return err
	}
	fmt.Print(indent(out))

	netns, err := node.PodNetNS(ctx, "demo", "meshed-app")
	if err != nil {
		return err
	}
	step("the meshed pod's nat table: nsenter --net=" + netns + " iptables-save -t nat")
	rules, err := node.IptablesSave(ctx, "demo", "meshed-app")
	if err != nil {
		return err
	}
	fmt.Print(indent(natTable(rules)))

	step("where each app's requests to demo/server (" + target + ") land")
	for _, s := range apps {
		line, err := lastReply(ctx, node, pods[s.Name])
		if err != nil {
			return err
		}
		verdict := "DIRECT to the server"
		if strings.HasPrefix(line, "proxy ") {
			verdict = "THROUGH THE PROXY"
		}
		fmt.Printf("   %-10s -> %s: %s\n", s.Name, verdict, line)
	}
	if err := showInspect(ctx, node, installCNI, apps); err != nil {
		return err
	}
	if err := showReports(ctx, node); err != nil {
		return err
	}
	kubectl, err := cluster.Kubectl()
	if err != nil {
		return err
	}
	step("the node keeps running")
	fmt.Printf(`   export KUBECONFIG=%s
   %s get pods -A -o wide    # or any kubectl
   # container logs are files (kubectl logs and exec need a node address,
   # which this loopback-only node lacks):
   ls %s
   # stop every process the demo started, by PID:
   make demo-down
`, node.Kubeconfig, kubectl, node.PodLogDir)
	return nil
}

// natTable cuts the nat table out of iptables-save's output.
func natTable(save string) string {
	var out []string
	in := false
	for line := range strings.Lines(save) {
		switch {
		case strings.HasPrefix(line, "*nat"):
			in = true
		case in && strings.HasPrefix(line, "COMMIT"):
			out = append(out, line)
			in = false
		}
		if in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// lastReply waits for the app's first reply and returns its latest one
// (the log's lines are "<time> stdout F <reply>").
func lastReply(ctx context.Context, node *cluster.Node, p cluster.Pod) (string, error) {
	for {
		var last string
		for line := range strings.Lines(node.ContainerLog(p, "app")) {
			if f := strings.SplitN(strings.TrimSpace(line), " ", 4); len(f) == 4 && (strings.HasPrefix(f[3], "proxy ") || strings.HasPrefix(f[3], "server ")) {
				last = f[3]
			}
		}
		if last != "" {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no reply in its log: %w", p.Metadata.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString("   " + line)
	}
	return b.String()
}

// showInspect runs `install-cni inspect` on the node for each app and
// prints its summary lines (the full report also lists the rules).
func showInspect(ctx context.Context, node *cluster.Node, installCNI string, apps []cluster.PodSpec) error {
	step("why is each app (not) in the mesh? install-cni inspect NAMESPACE/NAME, run on the node")
	for _, s := range apps {
		cmd := exec.CommandContext(ctx, installCNI, "inspect", "--kubeconfig", node.Kubeconfig, // #nosec G204 -- the demo's own binary
			"--cni-net-dir", node.CNINetDir, "--run-dir", node.IstioRunDir, "--netns-dir", node.NetnsDir, s.Namespace+"/"+s.Name)
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("inspect %s/%s: %w\n%s", s.Namespace, s.Name, err, out)
		}
		fmt.Printf("   $ install-cni inspect %s/%s\n", s.Namespace, s.Name)
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "decision:") || strings.HasPrefix(line, "verdict:") || strings.HasPrefix(line, "cni:") {
				fmt.Print("     " + line)
			}
		}
	}
	return nil
}

// showReports prints what the plugin reported to the agent about the demo's
// pods, from the agent's log (kubectl logs on a real cluster).
func showReports(ctx context.Context, node *cluster.Node) error {
	step("the plugin's reports in the agent's log (kubectl -n istio-cni logs ds/istio-cni-node on a cluster)")
	out, err := node.Kubectl(ctx, "-n", "istio-cni", "get", "pods", "-o", "jsonpath={.items[0].metadata.name} {.items[0].metadata.uid}")
	if err != nil {
		return err
	}
	var agent cluster.Pod
	if _, err := fmt.Sscan(out, &agent.Metadata.Name, &agent.Metadata.UID); err != nil {
		return fmt.Errorf("the agent's pod: %q: %w", out, err)
	}
	agent.Metadata.Namespace = "istio-cni"
	for line := range strings.Lines(node.ContainerLog(agent, "install-cni")) {
		if strings.Contains(line, `"msg":"plugin ADD"`) && strings.Contains(line, `"pod":"demo/`) {
			if i := strings.Index(line, "{"); i >= 0 {
				fmt.Print("   " + line[i:])
			}
		}
	}
	return nil
}
