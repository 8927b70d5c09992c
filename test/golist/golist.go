// Package golist reads a package's dependency closure with `go list`, for
// the tests that hold what a binary links (cmd/plugin, cmd/install-cni).
package golist

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Closure is a package's dependencies, itself included, and who among
// them imports each.
type Closure struct {
	Deps      []string
	importers map[string][]string
}

// Of lists pkg's closure.
func Of(t *testing.T, pkg string) Closure {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	c := Closure{importers: map[string][]string{}}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		c.Deps = append(c.Deps, f[0])
		for _, imp := range f[1:] {
			c.importers[imp] = append(c.importers[imp], f[0])
		}
	}
	if len(c.Deps) < 2 {
		t.Fatalf("go list %s found %d packages: the test reads nothing", pkg, len(c.Deps))
	}
	return c
}

// EntersAt is who imports dep, less those that unwanted (nil: none) says
// are themselves unwanted: where the closure enters what it should not
// link. Empty when only unwanted packages import it (the report then
// names their entry).
func (c Closure) EntersAt(dep string, unwanted func(string) bool) []string {
	imps := slices.Clone(c.importers[dep])
	if unwanted == nil {
		return imps
	}
	return slices.DeleteFunc(imps, unwanted)
}

// Under says whether pkg is prefix or inside it; a prefix ending in / is a
// directory of packages.
func Under(pkg, prefix string) bool {
	p := strings.TrimSuffix(prefix, "/")
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}
