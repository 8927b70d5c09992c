package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "istio-cni.local/istio-cni/"

// pluginPackages are the only packages of ours the plugin may link. The
// plugin runs once for every pod started on every node: what it links is
// what each pod start pays to load (docs/perf-notes.md). The node agent's
// packages (pkg/nodeagent/..., pkg/install/...) and the converter from
// client-go's Pod (pkg/kube/apipod) belong to the long-running agent.
var pluginPackages = []string{
	"cmd/plugin",
	"pkg/applied",
	"pkg/decision",
	"pkg/iptables",
	"pkg/iptables/nfnl",
	"pkg/iptables/xtables",
	"pkg/kube",
	"pkg/kube/apilookup",
	"pkg/plugin",
	"pkg/pluginconf",
	"pkg/podnet",
	"pkg/wire/lookups",
	"pkg/wire/reports",
}

// forbidden are packages the plugin must never link: a Kubernetes client
// and the API types cost megabytes and milliseconds at every pod start;
// HTTP, TLS and YAML are the API lookup helper's (pkg/kube/apiclient,
// run through pkg/kube/apilookup), which only a pod the node agent cannot
// answer for pays. No flag package either: the helper's request goes on
// its stdin as JSON.
var forbidden = []string{"k8s.io/client-go", "k8s.io/api/", "k8s.io/apimachinery",
	"net/http", "crypto/tls", "sigs.k8s.io/yaml", "go.yaml.in/", "gopkg.in/yaml", "flag"}

// The plugin's dependency closure holds no agent package and no Kubernetes
// client: a careless import fails here, naming who imports it.
func TestPluginLinksNoAgentCode(t *testing.T) {
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
	isForbidden := func(p string) bool {
		return slices.ContainsFunc(forbidden, func(f string) bool { return strings.HasPrefix(p, f) })
	}
	for _, dep := range deps {
		ours, isOurs := strings.CutPrefix(dep, module)
		switch {
		case isOurs && !slices.Contains(pluginPackages, ours):
			t.Errorf("the plugin links %s (imported by %v): the per-pod plugin links only %v; agent code belongs to install-cni", dep, importers[dep], pluginPackages)
		case isForbidden(dep):
			// Name only where the plugin's own closure enters it.
			entries := slices.DeleteFunc(slices.Clone(importers[dep]), isForbidden)
			if len(entries) > 0 {
				t.Errorf("the plugin links %s (imported by %v): no Kubernetes client, API types, HTTP, TLS or YAML in the per-pod plugin; the helper istio-cni-apilookup reads the API", dep, entries)
			}
		}
	}
}
