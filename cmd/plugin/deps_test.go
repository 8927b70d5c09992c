package main

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/golist"
)

const module = "istio-cni.local/istio-cni/"

// pluginPackages are the only packages of ours the full plugin,
// istio-cni-full, may link. It runs for every pod the agent does not:
// what it links is what each such pod start pays to load
// (docs/perf-notes.md). The node agent's packages (pkg/nodeagent/...,
// pkg/nodeagent/install/...) and the converter from client-go's Pod
// (pkg/nodeagent/apipod) belong to the long-running agent.
var pluginPackages = []string{
	"cmd/plugin/full",
	"pkg/applied",
	"pkg/decision",
	"pkg/iptables",
	"pkg/iptables/legacy",
	"pkg/iptables/nfnl",
	"pkg/iptables/nftables",
	"pkg/iptables/release",
	"pkg/iptables/xtables",
	"pkg/iptables/xtinfo",
	"pkg/kube",
	"pkg/kube/apilookup",
	"pkg/plugin",
	"pkg/pluginconf",
	"pkg/podnet",
	"pkg/podnet/nsthread",
	"pkg/version",
	"pkg/wire/handoff",
	"pkg/wire/lookups",
	"pkg/wire/reports",
	"pkg/wire/sockfile",
}

// shimPackages are the only packages of ours the shim, istio-cni, may
// link: every pod start pays for its start, so it holds what the hand-off
// needs and no more.
var shimPackages = []string{
	"cmd/plugin",
	"pkg/iptables/release",
	"pkg/shim",
	"pkg/wire/handoff",
}

// shimForbidden: besides the plugin's, what the shim leaves to
// istio-cni-full, since every pod start pays to load what the shim links:
// CNI's skel and types, the netlink library, the logger, regexp, crypto
// (the audit's fingerprints), net/netip (the rule model), and os, fmt,
// encoding/json and path/filepath, whose start alone cost each ADD about
// 0.1 ms (BENCHMARKS.md): the shim makes its system calls itself.
var shimForbidden = append([]string{"github.com/containernetworking/", "github.com/vishvananda/", "log/slog", "regexp",
	"crypto/", "net/netip/", "os", "fmt", "encoding/json", "path/filepath"}, forbidden...)

// forbidden are packages the plugin must never link: a Kubernetes client
// and the API types cost megabytes and milliseconds at every pod start;
// HTTP, TLS and YAML are the API lookup helper's (pkg/kube/apiclient,
// run through pkg/kube/apilookup), which only a pod the node agent cannot
// answer for pays. No flag package either: the helper's request goes on
// its stdin as JSON.
var forbidden = []string{"k8s.io/client-go", "k8s.io/api/", "k8s.io/apimachinery",
	"net/http", "crypto/tls", "sigs.k8s.io/yaml", "go.yaml.in/", "gopkg.in/yaml", "flag"}

// The plugins' dependency closures hold no agent package and no Kubernetes
// client, and the shim's only what the hand-off needs: a careless import
// fails here, naming who imports it.
func TestPluginLinksNoAgentCode(t *testing.T) {
	for _, c := range []struct {
		pkg, name string
		ours      []string
		forbidden []string
	}{
		{"./full", "istio-cni-full", pluginPackages, forbidden},
		{".", "the shim istio-cni", shimPackages, shimForbidden},
	} {
		checkDeps(t, c.pkg, c.name, c.ours, c.forbidden)
	}
}

func checkDeps(t *testing.T, pkg, name string, ours, forbidden []string) {
	c := golist.Of(t, pkg)
	// A prefix, not a package path: "gopkg.in/yaml" is every gopkg.in/yaml.vN.
	isForbidden := func(p string) bool {
		return slices.ContainsFunc(forbidden, func(f string) bool { return p == strings.TrimSuffix(f, "/") || strings.HasPrefix(p, f) })
	}
	for _, dep := range c.Deps {
		own, isOurs := strings.CutPrefix(dep, module)
		switch {
		case isOurs && !slices.Contains(ours, own):
			t.Errorf("%s links %s (imported by %v): it links only %v", name, dep, c.EntersAt(dep, nil), ours)
		case isForbidden(dep):
			// Name only where its own closure enters it.
			if entries := c.EntersAt(dep, isForbidden); len(entries) > 0 {
				t.Errorf("%s links %s (imported by %v): none of %v", name, dep, entries, forbidden)
			}
		}
	}
}

// The shim makes system calls of its own (memfd_create, dup3), which
// differ by architecture: it builds for the architectures Kubernetes
// nodes run, and for 32-bit ones.
func TestShimBuildsForOtherArchitectures(t *testing.T) {
	for _, arch := range []string{"arm64", "ppc64le", "s390x", "386", "mips"} {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), "go", "build", "-o", os.DevNull, ".")
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("GOARCH=%s: %v\n%s", arch, err, out)
			}
		})
	}
}

// The shim runs a few milliseconds at every pod start: its runtime is
// built without the GOMAXPROCS updater (main.go's go:debug line), whose
// goroutine and sysmon's reads of the cgroup it would never use.
func TestShimSkipsGOMAXPROCSUpdates(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.DefaultGODEBUG}}", ".").Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if godebug := strings.TrimSpace(string(out)); !slices.Contains(strings.Split(godebug, ","), "updatemaxprocs=0") {
		t.Errorf("the shim is built with GODEBUG %q: want updatemaxprocs=0 in it", godebug)
	}
}
