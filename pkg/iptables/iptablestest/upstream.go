package iptablestest

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// UpstreamNftablesGoldens is the folder of istio-nftables' goldens in the
// istio.io/istio module test/upstream pins (downloaded if need be): the
// oracle the native nftables model and its netlink writer are held to.
func UpstreamNftablesGoldens(t testing.TB) string {
	t.Helper()
	gomod, err := exec.CommandContext(t.Context(), "go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		t.Fatalf("go env GOMOD: %v (%q)", err, gomod)
	}
	cmd := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", "istio.io/istio")
	cmd.Dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "test", "upstream")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download istio.io/istio (test/upstream's pin): %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: no module folder in %s", out)
	}
	return filepath.Join(mod.Dir, "tools", "istio-nftables", "pkg", "capture", "testdata")
}
