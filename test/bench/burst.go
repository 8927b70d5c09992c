package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
)

// burstNamespace holds the burst's pods, so the runtime's log lines of
// other pods never count.
const burstNamespace = "burst"

// burst fills the node at once: n pods created together, every other one
// meshed, the others with the same two containers but opted out (so what
// differs is istio-cni, not an extra container). It reports per pod kind
// the runtime's RunPodSandbox time (containerd's own log: request and
// reply lines, so each pod has its own figure in a burst), the plugin's
// ADD from the agent's log of its reports, the agent's peak RSS and its
// audit pass over the full node.
func burst(ctx context.Context, node *cluster.Node, o cluster.Overlay, target string, n int) error {
	specs := make([]cluster.PodSpec, n)
	for i := range specs {
		meshed := i%2 == 1
		specs[i] = cluster.PodSpec{Namespace: burstNamespace, Name: fmt.Sprintf("b%03d", i), Target: target, Sidecar: true, OptedOut: !meshed}
	}
	start := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, s := range specs {
		wg.Go(func() { errs <- node.CreatePod(ctx, s.JSON()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	for _, s := range specs {
		if _, err := waitReadyFast(ctx, node, s); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
	}
	allReadyAfter := time.Since(start)

	sandboxes, failed, err := runPodSandboxTimes(filepath.Join(node.Dir, "containerd.log"), burstNamespace)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("burst: %d RunPodSandbox calls failed (containerd.log)", failed)
	}
	adds, err := pluginAdds(ctx, node, burstNamespace)
	if err != nil {
		return err
	}
	pid, err := node.ContainerPID(ctx, "istio-cni", "install-cni")
	if err != nil {
		return err
	}
	mem := procStatus(pid)
	// A full pass over the full node: one that began after every pod was
	// ready, so the second to end from now (passes are periodic).
	pass, err := nextFullPass(ctx, o.MetricsURL())
	if err != nil {
		return err
	}

	var plain, meshed []time.Duration
	for i, s := range specs {
		d, ok := sandboxes[s.Name]
		if !ok {
			return fmt.Errorf("burst: no RunPodSandbox lines for %s in containerd.log", s.Name)
		}
		if i%2 == 1 {
			meshed = append(meshed, d)
		} else {
			plain = append(plain, d)
		}
	}
	fmt.Printf("\n## A full node's burst: %d pods created at once (the node's 110 with the agent and the server), every other one meshed\n\n", n)
	fmt.Println("| pods | n | RunPodSandbox p50 (containerd) | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| plain (same two containers, opted out) | %d | %s | %s | %s |\n", len(plain), ms(pct(plain, 50)), ms(pct(plain, 99)), ms(pct(plain, 100)))
	fmt.Printf("| meshed | %d | %s | %s | %s |\n", len(meshed), ms(pct(meshed, 50)), ms(pct(meshed, 99)), ms(pct(meshed, 100)))
	fmt.Printf("\nEvery sandbox succeeded (no failed RunPodSandbox); all %d pods ready %s after the first create.\n", n, allReadyAfter.Round(100*time.Millisecond))
	fmt.Printf("The plugin's ADD, from its reports (the agent's log), %d meshed pods' reports: p50 %s, p99 %s, max %s.\n",
		len(adds), ms(pct(adds, 50)), ms(pct(adds, 99)), ms(pct(adds, 100)))
	fmt.Printf("The agent's peak RSS (VmHWM): %.1f MB (target 30 MB; after the burst %.1f MB anonymous, %.1f MB of its binary and files). Its audit pass over the full node: %.1f ms.\n",
		float64(mem["VmHWM:"])/1024, float64(mem["RssAnon:"])/1024, float64(mem["RssFile:"])/1024, float64(pass.Microseconds())/1000)
	if len(adds) == 0 {
		return fmt.Errorf("burst: no ADD report for %d meshed pods", len(meshed))
	}
	if len(adds) < len(meshed) {
		// Reports are datagrams, sent within 50 ms or dropped (the
		// kernel queues 10 per socket): an agent starved of CPU misses
		// some. Its audit still checks those pods on their next change.
		fmt.Printf("%d of %d meshed pods' ADD reports arrived (best effort: the rest were dropped while the agent was starved).\n", len(adds), len(meshed))
	}
	return nil
}

// containerd logs each CRI RunPodSandbox request and its reply (or
// failure) with the pod's metadata, in protobuf's text form (containerd
// 2), which separates fields by one space or, in some builds, two
// (protobuf-go picks per binary), and leaves out a zero attempt.
var runPodSandboxLine = regexp.MustCompile(`^time="([^"]+)".*msg="RunPodSandbox for name:\\"([^\\"]+)\\"\s+uid:\\"[^\\"]*\\"\s+namespace:\\"([^\\"]+)\\"(?:\s+attempt:\d+)?\s*(returns sandbox id|failed)?`)

// runPodSandboxTimes reads, per pod of namespace, the time from the
// request to the successful reply, and counts the failed calls.
func runPodSandboxTimes(logPath, namespace string) (map[string]time.Duration, int, error) {
	f, err := os.Open(logPath) // #nosec G304 -- the bench node's own log
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	began := map[string]time.Time{}
	took := map[string]time.Duration{}
	failed := 0
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		m := runPodSandboxLine.FindStringSubmatch(s.Text())
		if m == nil || m[3] != namespace {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return nil, 0, err
		}
		switch m[4] {
		case "":
			began[m[2]] = at
		case "failed":
			failed++
		default:
			took[m[2]] = at.Sub(began[m[2]])
		}
	}
	return took, failed, s.Err()
}

// pluginAdds reads the ADD durations the plugin reported for namespace's
// meshed pods, from the agent's log.
func pluginAdds(ctx context.Context, node *cluster.Node, namespace string) ([]time.Duration, error) {
	name, err := node.Kubectl(ctx, "-n", "istio-cni", "get", "pods", "-l", "app.kubernetes.io/name=istio-cni", "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		return nil, fmt.Errorf("the agent's pod: %w\n%s", err, name)
	}
	agent, found, err := node.GetPod(ctx, "istio-cni", strings.TrimSpace(name))
	if err != nil || !found {
		return nil, fmt.Errorf("the agent's pod %q: found %v, %v", name, found, err)
	}
	// The kubelet's log files: "<time> stdout F <line>".
	out := node.ContainerLog(agent, "install-cni")
	var ds []time.Duration
	for line := range strings.Lines(out) {
		var r struct {
			Msg        string  `json:"msg"`
			Pod        string  `json:"pod"`
			Redirect   bool    `json:"redirect"`
			DurationMS float64 `json:"duration_ms"`
		}
		if i := strings.IndexByte(line, '{'); i >= 0 {
			line = line[i:]
		}
		if json.Unmarshal([]byte(line), &r) != nil || r.Msg != "plugin ADD" || !r.Redirect || !strings.HasPrefix(r.Pod, namespace+"/") {
			continue
		}
		ds = append(ds, time.Duration(r.DurationMS*float64(time.Millisecond)))
	}
	return ds, nil
}

// nextFullPass waits for two audit passes to end and returns the second's
// duration.
func nextFullPass(ctx context.Context, metricsURL string) (time.Duration, error) {
	var seen []histogram
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		h, err := auditPasses(ctx, metricsURL)
		if err != nil {
			return 0, err
		}
		if len(seen) == 0 || h.count > seen[len(seen)-1].count {
			seen = append(seen, h)
		}
		if len(seen) == 3 {
			return time.Duration((seen[2].sum - seen[1].sum) / float64(seen[2].count-seen[1].count) * float64(time.Second)), nil
		}
	}
	return 0, fmt.Errorf("the audit ended no two passes in 2 minutes")
}

// auditPasses reads the agent's audit pass histogram.
func auditPasses(ctx context.Context, metricsURL string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return histogram{}, err
	}
	var h histogram
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "istio_cni_audit_pass_seconds_sum "); ok {
			_, _ = fmt.Sscan(v, &h.sum)
		}
		if v, ok := strings.CutPrefix(line, "istio_cni_audit_pass_seconds_count "); ok {
			_, _ = fmt.Sscan(v, &h.count)
		}
	}
	return h, nil
}
