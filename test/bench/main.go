// Command bench measures the plugin as a container runtime calls it: one
// exec per pod with CNI environment and a prevResult, a fresh network
// namespace per pod, a real kube-apiserver. Beside it, the floor: one bare
// iptables-restore of the same rules in a fresh namespace. Then the
// installer's repair latency and memory. `make bench` runs it;
// BENCHMARKS.md records its output.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/wire/reports"
	"istio-cni.local/istio-cni/test/cluster"
)

func main() {
	plugin := flag.String("plugin", "_output/bin/istio-cni-sidecar", "the plugin binary")
	installer := flag.String("installer", "_output/bin/install-cni", "the install-cni binary, for the as-installed table")
	upstream := flag.String("upstream", "", "upstream istio-cni's plugin binary, measured beside ours (never fetched: bring your own)")
	n := flag.Int("n", 200, "samples per measurement")
	conc := flag.Int("concurrency", 8, "ADDs at once in the concurrent run")
	backends := flag.String("backends", "auto,legacy", "iptables backends to measure, comma-separated")
	native := flag.Bool("native-nftables", false, "measure the as-installed table with NATIVE_NFTABLES=true, against nft -f")
	events := flag.Int("events", 100, "installer repair events per measurement")
	skipPlugin := flag.Bool("skip-plugin", false, "measure only the installer")
	skipInstaller := flag.Bool("skip-installer", false, "measure only the plugin")
	node := flag.Bool("node", false, "measure only pod starts on a real node (see -pods)")
	pods := flag.Int("pods", 30, "pods of each kind started on the real node (-node) or the Flannel fleet (-flannel)")
	burstPods := flag.Int("burst", 0, "then pods created at once on the emptied node, every other one meshed (108 fills kubelet's 110)")
	fleet := flag.Int("fleet", 0, "measure only the agents on fleets of 1 to this many nodes (cluster.StartFleet)")
	fleetPods := flag.String("fleet-pods", "10,25", "meshed pods a node started on the fleet, two counts, rising")
	fleetIdle := flag.Duration("fleet-idle", time.Minute, "the fleet's idle window")
	cpus := flag.Int("cpus", 0, "run each plugin (ours, upstream's) as on a node with this many CPUs, by GOMAXPROCS in its environment: Go's runtime sizes itself by the CPU count at every start; 0 leaves it to this machine's")
	flannel := flag.Int("flannel", 0, "measure only pod starts on a Flannel fleet of this many nodes (see -pods)")
	flag.Parse()
	if *cpus < 0 {
		fmt.Fprintf(os.Stderr, "bench: -cpus %d: want a CPU count, or 0 for this machine's\n", *cpus)
		os.Exit(2)
	}
	if *fleet > 0 {
		var p1, p2 int
		if _, err := fmt.Sscanf(*fleetPods, "%d,%d", &p1, &p2); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -fleet-pods %q: want two counts, as 10,25\n", *fleetPods)
			os.Exit(2)
		}
		if err := fleetBench(*fleet, p1, p2, *fleetIdle); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *flannel > 0 {
		if err := flannelBench(*flannel, *pods); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *node {
		if err := nodeBench(*pods, *burstPods); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if !*skipPlugin {
		err = run(*plugin, *installer, *upstream, *n, *conc, *cpus, strings.Split(*backends, ","), *native)
	}
	if err == nil && !*skipInstaller {
		err = installerBench(*events)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(plugin, installer, upstream string, n, conc, cpus int, backends []string, native bool) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces)")
	}
	plugin, err := filepath.Abs(plugin)
	if err != nil {
		return err
	}
	if installer, err = filepath.Abs(installer); err != nil {
		return err
	}
	if upstream != "" {
		if upstream, err = filepath.Abs(upstream); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "istio-cni-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	api, err := cluster.StartAPIServer(ctx, cluster.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer api.Stop()
	kubeconfig := filepath.Join(dir, "istio-cni-kubeconfig")
	if err := api.Kubeconfig(kubeconfig, cluster.PluginToken); err != nil {
		return err
	}
	uids := map[string]string{}
	for name, pod := range map[string][]byte{"bench": meshedPod, "bench-dns": dnsPod, "bench-tproxy": tproxyPod} {
		if err := api.CreatePod(ctx, pod); err != nil {
			return err
		}
		if uids[name], err = podUID(ctx, api, name); err != nil {
			return err
		}
	}
	// An agent takes the reporting rows' reports, as the DaemonSet's does.
	agent, err := reports.Listen(filepath.Join(dir, "reports.sock"))
	if err != nil {
		return err
	}
	defer agent.Close()
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go func() { _ = agent.Run(agentCtx, func(reports.Report) {}) }()
	b := &bench{plugin: plugin, kubeconfig: kubeconfig, agentSocket: filepath.Join(dir, "reports.sock"), n: n, cpus: cpus, uids: uids}
	printHeader(plugin, n, conc, cpus)
	if err := b.version(); err != nil {
		return err
	}
	for _, backend := range backends {
		if err := b.backend(backend, conc); err != nil {
			return err
		}
	}
	if err := b.peakRSS(); err != nil {
		return err
	}
	if err := b.installed(ctx, api, dir, installer, conc, native); err != nil {
		return fmt.Errorf("as installed: %w", err)
	}
	if upstream != "" {
		if err := b.upstream(upstream, dir, conc, native); err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
	}
	// The reports must have arrived, or the reporting rows measured nothing.
	if got := agent.Stats().Reports; got < uint64(n*len(backends)) {
		return fmt.Errorf("the agent received %d reports, want %d", got, n*len(backends))
	}
	fmt.Printf("\nThe agent received %d reports (none malformed: %d).\n", agent.Stats().Reports, agent.Stats().Malformed)
	fmt.Printf("\nGo %s, GOMAXPROCS %d.\n", runtime.Version(), runtime.GOMAXPROCS(0))
	return nil
}

// podUID reads the bench pod's uid: containerd passes it as K8S_POD_UID.
func podUID(ctx context.Context, api *cluster.APIServer, name string) (string, error) {
	status, body, err := api.Do(ctx, "GET", "/api/v1/namespaces/bench/pods/"+name, nil)
	if err != nil || status != 200 {
		return "", fmt.Errorf("GET bench pod: %d %v", status, err)
	}
	var pod struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	return pod.Metadata.UID, json.Unmarshal(body, &pod)
}

// tproxyPod is a meshed pod in TPROXY mode.
var tproxyPod = []byte(`{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"bench-tproxy","namespace":"bench","annotations":{"sidecar.istio.io/status":"{}",
  "sidecar.istio.io/interceptionMode":"TPROXY"}},
 "spec":{"containers":[{"name":"app","image":"app:v1"},{"name":"istio-proxy","image":"proxy:v1"}]}}`)

// dnsPod is a meshed pod with DNS capture on.
var dnsPod = []byte(`{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"bench-dns","namespace":"bench","annotations":{"sidecar.istio.io/status":"{}"}},
 "spec":{"containers":[{"name":"app","image":"app:v1"},{"name":"istio-proxy","image":"proxy:v1",
  "env":[{"name":"ISTIO_META_DNS_CAPTURE","value":"true"}]}]}}`)

// meshedPod is a default injected pod: what every ADD in the bench reads.
var meshedPod = []byte(`{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"bench","namespace":"bench","annotations":{"sidecar.istio.io/status":"{}"}},
 "spec":{"containers":[{"name":"app","image":"app:v1"},{"name":"istio-proxy","image":"proxy:v1"}]}}`)
