package multinode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// agentMetricsPort is the agent's /metrics port as deployments/ sets it,
// on each node's own address.
const agentMetricsPort = 15014

// heldPod is a meshed pod and the iptables-save of the backend that held
// its rules at its start.
type heldPod struct {
	n    *cluster.Node
	name string
	save string
}

// heldOnEveryNode starts a meshed pod on every node (prefix-i), deleted
// when the test ends, and notes where its rules are.
func heldOnEveryNode(t *testing.T, prefix string) []heldPod {
	t.Helper()
	target := serverAddr(t)
	var held []heldPod
	for i, n := range env.fleet.Nodes {
		s := cluster.PodSpec{Namespace: "default", Name: fmt.Sprintf("%s-%d", prefix, i), Target: target, Sidecar: true, NodeName: n.Name}
		if err := n.CreatePod(t.Context(), s.JSON()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.DeletePod(context.Background(), s.Namespace, s.Name) })
		held = append(held, heldPod{n: n, name: s.Name})
	}
	for i := range held {
		h := &held[i]
		if err := startedRedirected(t.Context(), h.n, h.name, nil); err != nil {
			t.Fatal(err)
		}
		save, _, err := heldIn(t.Context(), h.n, "default", h.name)
		if err != nil {
			t.Fatalf("node %s: %s: %v", h.n.Name, h.name, err)
		}
		h.save = save
		t.Logf("node %s: %s's rules in %s", h.n.Name, h.name, save)
	}
	return held
}

// still: the pod's rules are where they were, exactly the model, none of
// istio-cni's in the other backend, and no Istio* Event on it.
func (h heldPod) still(ctx context.Context) error {
	save, out, err := heldIn(ctx, h.n, "default", h.name)
	switch {
	case err != nil:
		return fmt.Errorf("node %s: %s: %w", h.n.Name, h.name, err)
	case save != h.save:
		return fmt.Errorf("node %s: %s: its rules moved from %s to %s", h.n.Name, h.name, h.save, save)
	}
	if err := matchModel(out, iptables.Build(iptables.DefaultSpec(), true, false)); err != nil {
		return fmt.Errorf("node %s: %s: %w", h.n.Name, h.name, err)
	}
	if ev := h.n.PodEvents(ctx, "default", h.name); strings.Contains(ev, "Istio") {
		return fmt.Errorf("node %s: %s: Events: %s", h.n.Name, h.name, ev)
	}
	return nil
}

// waitAuditPasses waits for node n's agent to finish count more audit
// passes than when first asked.
func waitAuditPasses(t *testing.T, n *cluster.Node, count float64) {
	t.Helper()
	url := "http://" + netip.AddrPortFrom(n.NodeIP, agentMetricsPort).String() + "/metrics"
	first := -1.0
	poll.Until(t, 2*time.Minute, fmt.Sprintf("node %s: %v audit passes", n.Name, count), func() (bool, string) {
		passes, err := metric(t.Context(), url, "istio_cni_audit_pass_seconds_count")
		if err != nil {
			return false, err.Error()
		}
		if first < 0 {
			first = passes
		}
		return passes >= first+count+1, fmt.Sprintf("passes %v (first seen %v)", passes, first)
	})
}

// metric is one unlabelled series' value in the /metrics at url.
func metric(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("GET %s: no %s", url, name)
}
