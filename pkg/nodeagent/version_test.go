package nodeagent

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"istio-cni.local/istio-cni/pkg/version"
)

// install-cni version and --version print one line and exit 0 wherever
// the binary is: no flag, no environment, not even its own path.
func TestVersionNeedsNoFlagsOrEnvironment(t *testing.T) {
	getenv := func(k string) string {
		t.Errorf("version read $%s", k)
		return ""
	}
	executable := func() (string, error) {
		t.Error("version asked for its own path")
		return "", io.ErrUnexpectedEOF
	}
	want := "install-cni " + version.Get() + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr bytes.Buffer
		if code := Command(args, getenv, executable, &stdout, &stderr); code != 0 || stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("install-cni %s: exit %d, stdout %q, stderr %q; want 0 and %q", args[0], code, stdout.String(), stderr.String(), want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Command([]string{"version", "--short"}, getenv, executable, &stdout, &stderr); code != 2 || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), `unexpected arguments ["--short"]`) {
		t.Errorf("install-cni version --short: exit %d, stdout %q, stderr %q; want 2 naming the argument", code, stdout.String(), stderr.String())
	}
}

// The agent's first log line names its version, and /metrics serves it as
// istio_cni_build_info: which build a node runs, from its logs or a
// dashboard.
func TestAgentNamesItsBuild(t *testing.T) {
	n := newFakeNode(t)
	cfg, err := ParseFlags(nil, n.getenv, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a, err := New(cfg, nil, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	var line struct{ Msg, Version string }
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Version != version.Get() {
		t.Errorf("first log line %s (%v): want version %q", first, err, version.Get())
	}
	want := `
# HELP istio_cni_build_info 1, labelled with the node agent's build: its version (the release tag or commit) and the Go release it was built with.
# TYPE istio_cni_build_info gauge
istio_cni_build_info{go_version="` + runtime.Version() + `",version="` + version.Get() + `"} 1
`
	if err := testutil.GatherAndCompare(a.metrics.Registry, strings.NewReader(want), "istio_cni_build_info"); err != nil {
		t.Error(err)
	}
}
