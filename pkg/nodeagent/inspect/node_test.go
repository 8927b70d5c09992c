package inspect

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/nodeagent/inspect -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (-update rewrites it); got:\n%s", path, got)
	}
}

// agentAt serves /readyz and /metrics as the agent would.
func agentAt(ready string, metrics string) NodeDeps {
	return NodeDeps{Get: func(_ context.Context, url string) (int, string, error) {
		switch {
		case strings.HasSuffix(url, "127.0.0.1:8000/readyz"):
			if ready == "" {
				return http.StatusOK, "ready\n", nil
			}
			return http.StatusServiceUnavailable, "not ready: " + ready + "\n", nil
		case strings.HasSuffix(url, "127.0.0.1:15014/metrics"):
			return http.StatusOK, metrics, nil
		}
		return 0, "", errors.New("connection refused")
	}}
}

const metricsText = `# HELP istio_cni_audit_pods_unredirected Meshed pods on this node currently running without their redirect rules.
# TYPE istio_cni_audit_pods_unredirected gauge
istio_cni_audit_pods_unredirected %d
istio_cni_audit_pods_checked 5
istio_cni_audit_pods_unchecked 0
istio_cni_missed_injection_pods %d
istio_cni_missed_injection_restarts_total{result="evicted"} 3
`

func nodeOpts(dir string) NodeOptions {
	return NodeOptions{CNINetDir: dir, HealthAddr: ":8000", MetricsAddr: "0.0.0.0:15014", Build: "install-cni v1.4.0 (go1.26.0, linux/amd64)"}
}

func TestNodeSummary(t *testing.T) {
	for _, tc := range []struct {
		name           string
		chained        bool
		ready, metrics string
		ok             bool
	}{
		{"node-ok", true, "", strings.NewReplacer("%d", "0").Replace(metricsText), true},
		{"node-bad", false, "no valid primary CNI config", "istio_cni_audit_pods_unredirected 2\nistio_cni_audit_pods_checked 5\nistio_cni_audit_pods_unchecked 1\nistio_cni_missed_injection_pods 1\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Node(t.Context(), nodeOpts(configDir(t, tc.chained)), agentAt(tc.ready, tc.metrics))
			if d.OK() != tc.ok {
				t.Errorf("OK %v, want %v: %+v", d.OK(), tc.ok, d)
			}
			var b strings.Builder
			if err := d.PrintJSON(&b); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.name+".json", b.String())
			b.Reset()
			if err := d.Print(&b); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.name+".txt", b.String())
		})
	}
}

// An agent that does not answer, or exports no audit (no API access),
// says so.
func TestNodeSummaryWithoutTheAgent(t *testing.T) {
	d := Node(context.Background(), NodeOptions{CNINetDir: configDir(t, true), HealthAddr: ":9", MetricsAddr: ":10"}, agentAt("", ""))
	if d.OK() || d.Ready || !strings.Contains(d.ReadyReason, "did not answer") || !strings.Contains(d.MetricsError, "did not answer") {
		t.Errorf("%+v", d)
	}
	d = Node(context.Background(), nodeOpts(configDir(t, true)), agentAt("", "go_goroutines 7\n"))
	if !d.OK() || d.Unredirected != nil || d.MissedInjection != nil {
		t.Errorf("no audit series: %+v", d)
	}
}

// inspect -o json: the same facts as the text, its verdict the same.
func TestReportJSON(t *testing.T) {
	p := pod(map[string]string{"sidecar.istio.io/status": "{}"})
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", []string{"nat ISTIO_OUTPUT: chain missing"}))
	if err != nil {
		t.Fatal(err)
	}
	r.Netns = "/var/run/netns/cni-1" // the temp config dir is not stable: the document is
	r.Config = "02-istio-cni.conflist"
	var b strings.Builder
	if err := r.PrintJSON(&b); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.json", b.String())
	if !strings.Contains(render(t, r), "verdict:   "+r.Verdict().Text) {
		t.Error("the text and the JSON disagree on the verdict")
	}
}
