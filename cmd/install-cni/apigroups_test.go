package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// agentAPIGroups are the only API types the agent links: the kinds it
// reads and writes (pkg/nodeagent/kubeclient). A package of API types
// costs the agent's resident memory on every node whether or not it asks
// for the kind: client-go's Clientset registers about 55 of them at start
// (6 MB of the agent's RSS, BENCHMARKS.md).
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
// own kinds: a careless import fails here, naming who imports it.
func TestAgentLinksOnlyItsAPIGroups(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	importers := map[string][]string{}
	var deps []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		deps = append(deps, f[0])
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	forbidden := []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/discovery"}
	var linked []string
	for _, dep := range deps {
		switch {
		case slices.ContainsFunc(forbidden, func(f string) bool { return under(dep, f) }):
			t.Errorf("install-cni links %s (imported by %v): its API client is pkg/nodeagent/kubeclient", dep, importers[dep])
		case strings.HasPrefix(dep, "k8s.io/api/"):
			linked = append(linked, dep)
			if !slices.Contains(agentAPIGroups, dep) {
				t.Errorf("install-cni links the API types %s (imported by %v): only %v", dep, importers[dep], agentAPIGroups)
			}
		}
	}
	if !slices.Contains(linked, "k8s.io/api/core/v1") {
		t.Fatalf("go list found no k8s.io/api/core/v1 among %d packages: the test reads nothing", len(deps))
	}
}
