package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "istio-cni.local/istio-cni/"

// The tree says which code runs for the node's lifetime and which once per
// pod (docs/architecture.md), and the imports keep it so:
//   - only the agent (cmd/install-cni) reaches into pkg/nodeagent: no
//     per-pod binary links the agent's code;
//   - every other package at the top of pkg/ is one the plugin's binaries
//     link, but pkg/chain, the design's pure conflist model, which only
//     the agent uses: code only the agent runs lives under pkg/nodeagent;
//   - nothing imports a layer drawn above it: the wire imports neither
//     side, and the rule and conflist models import no plugin, wire or
//     agent code.
//
// cmd/plugin/deps_test.go holds the plugin's side: what its binaries may link.
func TestAgentCodeStaysUnderNodeagent(t *testing.T) {
	imports := ourImports(t, module+"...")
	plugin := closure(imports, "cmd/plugin", "cmd/plugin/full", "cmd/plugin/apilookup")
	above := map[string][]string{
		"pkg/wire/":      {"pkg/plugin", "pkg/shim", "pkg/podnet", "pkg/nodeagent/"},
		"pkg/iptables":   {"pkg/plugin", "pkg/shim", "pkg/podnet", "pkg/wire/", "pkg/nodeagent/", "pkg/chain"},
		"pkg/chain":      {"pkg/plugin", "pkg/shim", "pkg/podnet", "pkg/wire/", "pkg/nodeagent/"},
		"pkg/plugin":     {"pkg/nodeagent/", "pkg/shim"},
		"pkg/shim":       {"pkg/nodeagent/", "pkg/plugin"},
		"pkg/podnet":     {"pkg/nodeagent/", "pkg/plugin", "pkg/wire/"},
		"pkg/decision":   {"pkg/nodeagent/", "pkg/plugin", "pkg/wire/"},
		"pkg/applied":    {"pkg/nodeagent/", "pkg/plugin", "pkg/wire/"},
		"pkg/kube":       {"pkg/nodeagent/", "pkg/plugin", "pkg/wire/"},
		"pkg/pluginconf": {"pkg/nodeagent/", "pkg/plugin", "pkg/wire/"},
		"pkg/version":    {"pkg/"},
	}
	for pkg, deps := range imports {
		for _, dep := range deps {
			if under(dep, "pkg/nodeagent") && !under(pkg, "pkg/nodeagent") && pkg != "cmd/install-cni" {
				t.Errorf("%s imports %s: only the node agent uses pkg/nodeagent", pkg, dep)
			}
			for layer, forbidden := range above {
				if !under(pkg, layer) {
					continue
				}
				for _, f := range forbidden {
					if under(dep, f) && !under(dep, layer) {
						t.Errorf("%s imports %s, which is drawn above it", pkg, dep)
					}
				}
			}
		}
		if top, ok := topLevel(pkg); ok && !plugin[pkg] && top != "pkg/chain" && top != "pkg/nodeagent" && !strings.HasPrefix(pkg, "pkg/iptables/iptablestest") {
			t.Errorf("%s is linked by no plugin binary: code only the agent runs lives under pkg/nodeagent", pkg)
		}
	}
	if len(imports) < 20 || len(plugin) < 10 {
		t.Fatalf("go list found %d packages, the plugin %d: the test reads nothing", len(imports), len(plugin))
	}
}

// drawn is pkg/ as docs/architecture.md draws it: the plugin's packages,
// the wire, the node agent and the design's two models. A reader takes in
// a dozen entries at a glance; a new package finds its place below one of
// them, or is drawn here and there.
var drawn = []string{
	"applied", "chain", "decision", "iptables", "kube", "nodeagent",
	"plugin", "pluginconf", "podnet", "shim", "version", "wire",
}

func TestPkgIsAsDrawn(t *testing.T) {
	entries, err := os.ReadDir("../../pkg")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, drawn) {
		t.Errorf("ls pkg: %v, docs/architecture.md draws %v", names, drawn)
	}
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range drawn {
		if !strings.Contains(string(doc), "`pkg/"+name+"`") && !strings.Contains(string(doc), "`pkg/"+name+"/") {
			t.Errorf("docs/architecture.md's table has no row for pkg/%s", name)
		}
	}
}

// ourImports maps each of our packages (module-relative) to ours it imports.
func ourImports(t *testing.T, pattern string) map[string][]string {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok || strings.HasPrefix(pkg, "test/") {
			continue
		}
		imports[pkg] = []string{}
		for _, imp := range f[1:] {
			if dep, ok := strings.CutPrefix(imp, module); ok {
				imports[pkg] = append(imports[pkg], dep)
			}
		}
	}
	return imports
}

// closure is every package the roots import, directly or not, the roots
// included.
func closure(imports map[string][]string, roots ...string) map[string]bool {
	seen := map[string]bool{}
	todo := slices.Clone(roots)
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if !seen[p] {
			seen[p] = true
			todo = append(todo, imports[p]...)
		}
	}
	return seen
}

// under says whether pkg is layer or inside it; a layer ending in / is a
// directory of packages.
func under(pkg, layer string) bool {
	return pkg == strings.TrimSuffix(layer, "/") || strings.HasPrefix(pkg, strings.TrimSuffix(layer, "/")+"/")
}

// topLevel is pkg's entry in pkg/.
func topLevel(pkg string) (string, bool) {
	rest, ok := strings.CutPrefix(pkg, "pkg/")
	if !ok {
		return "", false
	}
	first, _, _ := strings.Cut(rest, "/")
	return "pkg/" + first, true
}
