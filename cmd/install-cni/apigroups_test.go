package main

import (
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/golist"
)

// agentAPIGroups are the only API types the agent links: the kinds it
// reads and writes (pkg/nodeagent/kubeclient). A package of API types
// costs the agent's resident memory on every node whether or not it asks
// for the kind: client-go's Clientset registers 53 of them at start
// (6 MB of the agent's RSS, BENCHMARKS.md "Node agent").
var agentAPIGroups = []string{
	"k8s.io/api/core/v1",
	"k8s.io/api/apps/v1",
	"k8s.io/api/coordination/v1",
	"k8s.io/api/admissionregistration/v1",
	"k8s.io/api/policy/v1",
	"k8s.io/api/authentication/v1",
}

// The agent links no client-go Clientset, informer factory or discovery
// client (each registers every built-in group), and no API types but its
// own kinds: a careless import fails here, naming where it enters.
func TestAgentLinksOnlyItsAPIGroups(t *testing.T) {
	c := golist.Of(t, ".")
	unwanted := func(p string) bool {
		return golist.Under(p, "k8s.io/client-go/kubernetes") || golist.Under(p, "k8s.io/client-go/informers") ||
			golist.Under(p, "k8s.io/client-go/discovery") ||
			strings.HasPrefix(p, "k8s.io/api/") && !slices.Contains(agentAPIGroups, p)
	}
	for _, dep := range c.Deps {
		if !unwanted(dep) {
			continue
		}
		if entries := c.EntersAt(dep, unwanted); len(entries) > 0 {
			t.Errorf("install-cni links %s (imported by %v): its API client is pkg/nodeagent/kubeclient, its API types only %v",
				dep, entries, agentAPIGroups)
		}
	}
	if !slices.Contains(c.Deps, "k8s.io/api/core/v1") {
		t.Fatal("go list found no k8s.io/api/core/v1: the test reads nothing")
	}
}
