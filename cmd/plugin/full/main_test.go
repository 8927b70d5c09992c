package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stampFlag is the flag the Makefile stamps every binary with
// (pkg/version); -X names a variable the compiler does not check, so a
// renamed one would leave every build "unknown" without this test.
const stampFlag = "-X istio-cni.local/istio-cni/pkg/version.version="

// Run without CNI_COMMAND, the plugin prints skel's about: its build, with
// the stamped version, and the CNI versions it speaks.
func TestAboutNamesTheStampedVersion(t *testing.T) {
	const stamp = "v0.0.0-stamp-test"
	bin := filepath.Join(t.TempDir(), "istio-cni-full")
	build := exec.CommandContext(t.Context(), "go", "build", "-ldflags", stampFlag+stamp, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), bin) // #nosec G204 -- the binary just built
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s without CNI_COMMAND: %v\n%s", bin, err, stderr.String())
	}
	first, _, _ := strings.Cut(stderr.String(), "\n")
	if !strings.HasPrefix(first, "istio-cni "+stamp+" (go") || stdout.Len() != 0 {
		t.Errorf("about: stdout %q, stderr %q; want stderr to open \"istio-cni %s (go...\"", stdout.String(), stderr.String(), stamp)
	}
}
