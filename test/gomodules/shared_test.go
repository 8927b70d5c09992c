package gomodules

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// build is one `go build` (or the main module's `go test`) of the suite.
type build struct {
	name, dir string
	args      []string
}

// builds lists the suite's builds; Istio's build tags are the Makefile's.
func builds(t *testing.T, root string) []build {
	t.Helper()
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	tags := func(pkg string) string {
		m := regexp.MustCompile(`-tags (\S+) .*` + regexp.QuoteMeta(pkg) + `\s*$`).FindSubmatch(findLine(makefile, pkg))
		if m == nil {
			t.Fatalf("the Makefile builds %s with no -tags: the list here is out of date", pkg)
		}
		return string(m[1])
	}
	const discovery, agent = "istio.io/istio/pilot/cmd/pilot-discovery", "istio.io/istio/pilot/cmd/pilot-agent"
	return []build{
		{"main module", ".", []string{"-test", "./..."}},
		{"istiod", "test/upstream", []string{"-tags", tags(discovery), discovery}},
		{"pilot-agent", "test/upstream", []string{"-tags", tags(agent), agent}},
		{"upstream istio-cni", "test/upstream", []string{"istio.io/istio/cni/cmd/istio-cni"}},
		{"helm", "test/helm", []string{"helm.sh/helm/v3/cmd/helm"}},
		{"test node", "test/kube", nodeCommands(t, root)},
		{"the node's primary CNI", ".", cniPlugins(t, makefile)},
	}
}

// cniPlugins are the reference plugins `make cni-plugins` builds in the
// main module (CNI_PLUGIN_PACKAGES).
func cniPlugins(t *testing.T, makefile []byte) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^CNI_PLUGIN_PACKAGES := (.+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no CNI_PLUGIN_PACKAGES: the list here is out of date")
	}
	var pkgs []string
	for _, p := range strings.Fields(string(m[1])) {
		pkgs = append(pkgs, "github.com/containernetworking/plugins/plugins/"+p)
	}
	return pkgs
}

// nodeCommands are the test node's commands, as test/kube/tools.go pins
// them (the Makefile builds those).
func nodeCommands(t *testing.T, root string) []string {
	t.Helper()
	tools, err := os.ReadFile(filepath.Join(root, "test", "kube", "tools.go"))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*_ "(\S+)"$`).FindAllSubmatch(tools, -1) {
		pkgs = append(pkgs, string(m[1]))
	}
	if len(pkgs) == 0 {
		t.Fatal("test/kube/tools.go imports no command")
	}
	return pkgs
}

// findLine is the Makefile line that builds pkg (ends with it).
func findLine(makefile []byte, pkg string) []byte {
	for _, line := range bytes.Split(makefile, []byte("\n")) {
		if bytes.HasSuffix(bytes.TrimSpace(line), []byte(pkg)) && bytes.Contains(line, []byte(" build ")) {
			return line
		}
	}
	return nil
}

// modules lists the modules (path → version) whose packages b compiles;
// a replaced module's version is its replacement's (test/kube replaces
// the Kubernetes staging modules with their releases).
func modules(t *testing.T, root string, b build) map[string]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}{{end}}"}, b.args...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(root, b.dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), b.dir, err, stderr)
	}
	mods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			mods[path] = version
		}
	}
	return mods
}

// TestBuildsShareModuleVersions: every module two builds compile is at
// one version in both, so its packages are compiled once. A dependency
// bump in one go.mod fails here until the others follow:
// `go get MODULE@VERSION` in each directory named.
func TestBuildsShareModuleVersions(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string][]string{} // module → version → builds
	for _, b := range builds(t, root) {
		for path, version := range modules(t, root, b) {
			if seen[path] == nil {
				seen[path] = map[string][]string{}
			}
			seen[path][version] = append(seen[path][version], fmt.Sprintf("%s (%s)", b.name, b.dir))
		}
	}
	if len(seen["k8s.io/client-go"]) == 0 {
		t.Fatal("no build compiles k8s.io/client-go: the lists are wrong")
	}
	var paths []string
	for path := range seen {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if len(seen[path]) < 2 {
			continue
		}
		var at []string
		for version, bs := range seen[path] {
			at = append(at, version+" in "+strings.Join(bs, ", "))
		}
		sort.Strings(at)
		t.Errorf("%s: %s", path, strings.Join(at, "; "))
	}
}
