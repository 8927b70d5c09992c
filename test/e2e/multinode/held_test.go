package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// agentMetricsPort is the agent's /metrics port: its --metrics-addr
// default, which deployments/ keeps, on each node's own address.
const agentMetricsPort = 15014

// heldPod is a meshed pod and the iptables-save of the backend that held
// its rules at its start.
type heldPod struct {
	n    *cluster.Node
	name string
	save string
}

// heldOnEveryNode starts a meshed pod on every node (prefix-i), deleted
// when the test ends, and notes where its rules are: legacy on a legacy
// node, which the fleet must have.
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
	legacy := 0
	for i := range held {
		h := &held[i]
		if err := startedRedirected(t.Context(), h.n, h.name, nil); err != nil {
			t.Fatal(err)
		}
		save, _, err := heldIn(t.Context(), h.n, "default", h.name)
		if err != nil {
			t.Fatalf("node %s: %s: %v", h.n.Name, h.name, err)
		}
		if h.n.Iptables == cluster.LegacyIptables {
			legacy++
			if save != "iptables-legacy-save" {
				t.Fatalf("node %s is legacy: %s's rules in %s, want iptables-legacy-save", h.n.Name, h.name, save)
			}
		}
		h.save = save
		t.Logf("node %s: %s's rules in %s", h.n.Name, h.name, save)
	}
	if legacy == 0 {
		t.Fatal("no legacy node in the fleet: the test would cover nf_tables nodes only")
	}
	return held
}

// still: the pod's rules are where they were, exactly the model, none of
// istio-cni's in the other backend, and no Istio* Event on it.
func (h heldPod) still(ctx context.Context) error {
	where := fmt.Sprintf("node %s: %s", h.n.Name, h.name)
	save, out, err := heldIn(ctx, h.n, "default", h.name)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", where, err)
	case save != h.save:
		return fmt.Errorf("%s: its rules moved from %s to %s", where, h.save, save)
	}
	if err := matchModel(out, iptables.Build(iptables.DefaultSpec(), true, false)); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	events, err := h.n.PodEventList(ctx, "default", h.name)
	if err != nil {
		return fmt.Errorf("%s: reading its Events: %w", where, err)
	}
	for _, e := range events {
		if strings.HasPrefix(e.Reason, "Istio") {
			return fmt.Errorf("%s: Event %s: %s", where, e.Reason, e.Message)
		}
	}
	return nil
}

// waitAuditPasses waits for every node's agent to finish count audit
// passes begun after the call, the last of which checked at least meshed
// pods (cluster.AuditPasses), on all nodes at once.
func waitAuditPasses(t *testing.T, count float64, meshed int) {
	t.Helper()
	waiting := map[*cluster.Node]func() (bool, string){}
	for _, n := range env.fleet.Nodes {
		url := "http://" + netip.AddrPortFrom(n.NodeIP, agentMetricsPort).String() + "/metrics"
		waiting[n] = cluster.AuditPasses(t.Context(), url, count, meshed)
	}
	poll.Until(t, 2*time.Minute, fmt.Sprintf("%v audit passes on every node checking %d meshed pods", count, meshed), func() (bool, string) {
		var why []string
		for _, n := range env.fleet.Nodes {
			done, ok := waiting[n]
			if !ok {
				continue
			}
			if passed, reason := done(); passed {
				delete(waiting, n)
			} else {
				why = append(why, n.Name+": "+reason)
			}
		}
		return len(waiting) == 0, strings.Join(why, "; ")
	})
}
