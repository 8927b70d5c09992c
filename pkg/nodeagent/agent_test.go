package nodeagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

const bridgePrimary = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}`

// fakeNode is a node's directories and the agent's environment.
type fakeNode struct {
	root, bin, netd, run string
	env                  map[string]string
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	root := t.TempDir()
	n := &fakeNode{root: root, bin: filepath.Join(root, "bin"), netd: filepath.Join(root, "net.d"), run: filepath.Join(root, "run")}
	sa, src := filepath.Join(root, "sa"), filepath.Join(root, "image")
	for _, d := range []string{n.bin, n.netd, sa, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := cluster.SelfSignedCA()
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string]string{
		filepath.Join(src, install.PluginBinary): "#!/bin/sh\n", filepath.Join(src, install.LookupBinary): "#!/bin/sh\n# lookup\n",
		filepath.Join(src, install.FullBinary): "#!/bin/sh\n# full\n",
		filepath.Join(sa, "token"):             "token-1",
		filepath.Join(sa, "ca.crt"):            string(ca), filepath.Join(n.netd, "10-bridge.conflist"): bridgePrimary,
	} {
		if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.env = map[string]string{"CNI_BIN_DIR": n.bin, "CNI_NET_DIR": n.netd, "RUN_DIR": n.run,
		"SERVICE_ACCOUNT_DIR": sa, "PLUGIN_SOURCE": src, "POD_NAMESPACE": "istio-cni",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
		"HEALTH_ADDR": "127.0.0.1:0", "METRICS_ADDR": "127.0.0.1:0"}
	return n
}

func (n *fakeNode) getenv(k string) string { return n.env[k] }

// startAgent runs an agent without API access until stop or the end of
// the test.
func startAgent(t *testing.T, n *fakeNode) (a *Agent, stop func()) {
	t.Helper()
	cfg, err := ParseFlags(nil, n.getenv, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	a, err = New(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	poll.Until(t, 10*time.Second, "serving", func() (bool, string) { return len(a.Addrs()) == 2, fmt.Sprint(a.Addrs()) })
	return a, stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestEndpoints: /readyz is the installer's readiness, /healthz the loops'
// progress, /metrics the installer's series.
func TestEndpoints(t *testing.T) {
	n := newFakeNode(t)
	a, _ := startAgent(t, n)
	health, metrics := "http://"+a.Addrs()[0], "http://"+a.Addrs()[1]
	poll.Until(t, 10*time.Second, "/readyz ready", func() (bool, string) {
		code, body := get(t, health+"/readyz")
		return code == http.StatusOK, body
	})
	if code, body := get(t, health+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d %s", code, body)
	}
	_, body := get(t, metrics+"/metrics")
	for _, want := range []string{"istio_cni_install_ready 1", `istio_cni_install_writes_total{file="conflist",reason="install"} 1`,
		"istio_cni_install_conflict 0", "istio_cni_install_preempted 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// A loop that stops making progress fails /healthz, naming it; the
	// agent's readiness is another matter.
	a.beats.Loop("a wedged loop", time.Millisecond)
	poll.Until(t, 10*time.Second, "/healthz fails", func() (bool, string) {
		code, body := get(t, health+"/healthz")
		return code == http.StatusInternalServerError && strings.Contains(body, "a wedged loop silent"), body
	})
	if code, _ := get(t, health+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d with a wedged loop: readiness is the files' state", code)
	}
}

func TestParseFlags(t *testing.T) {
	n := newFakeNode(t)
	c, err := ParseFlags([]string{"--audit-action=report"}, n.getenv, "/bin")
	if err != nil {
		t.Fatal(err)
	}
	if c.AuditAction != "report" || c.AuditInterval != 30*time.Second || c.DaemonSetName != "istio-cni-node" ||
		c.ServiceAccount != "istio-cni" || c.Install.CNINetDir != n.netd || c.Install.NetnsDir != "/host/var/run/netns" || c.Backend != release.Auto {
		t.Errorf("config %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--health-addr=8000"}, "--health-addr"},
		{[]string{"--daemonset-name=Bad/Name"}, "--daemonset-name"},
		{[]string{"--service-account=Bad_SA"}, "--service-account"},
		{[]string{"--audit-action=fix"}, "--audit-action"},
		{[]string{"--audit-interval=10ms"}, "--audit-interval"},
		{[]string{"--audit-confirm=-1s"}, "--audit-confirm"},
		{[]string{"--node-taint=maybe"}, "--node-taint"},
		{[]string{"--taint-grace=1h"}, "--taint-grace"},
		{[]string{"--netns-dir=netns"}, "--netns-dir"},
		{[]string{"--iptables-backend=ebpf"}, "--iptables-backend"},
		{[]string{"--node-name=Node_A"}, "--node-name"},
		{[]string{"--missed-injection=delete"}, "--missed-injection: unknown mode \"delete\": want report, restart or off"},
		{[]string{"--missed-injection-restarts-per-minute=0"}, "--missed-injection-restarts-per-minute"},
		{[]string{"--validation-container=Istio_Validation"}, "--validation-container \"Istio_Validation\": want a container name"},
		{[]string{"--mode=sideways"}, "--mode"}, // the installer's, through the same parse
		{[]string{"--taint-key=cni.istio.io/not ready"}, "--taint-key \"cni.istio.io/not ready\": want a taint key"},
		{[]string{"--taint-key=node.kubernetes.io/network-unavailable"}, "belongs to Kubernetes"},
		{[]string{"--cni-conf-group-read=sometimes"}, "--cni-conf-group-read \"sometimes\": want true or false"},
		{[]string{"stray"}, "unexpected"},
	} {
		_, err := ParseFlags(tc.args, n.getenv, "/bin")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to name %s", tc.args, err, tc.want)
		}
	}
}

// With API access but no node name, the audit and the taint off, the
// default missed-injection report steps aside: the agent still installs.
// With the audit on, the missing name is an error naming the flags.
func TestMissedInjectionWithoutNodeName(t *testing.T) {
	n := newFakeNode(t)
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := ParseFlags([]string{"--audit-action=off"}, n.getenv, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, rc, log)
	if err != nil || a.missed != nil || a.pods != nil {
		t.Fatalf("New = %v; missed %v, pods %v: want an agent without pod duties", err, a.missed, a.pods)
	}
	cfg, err = ParseFlags(nil, n.getenv, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, rc, log); err == nil || !strings.Contains(err.Error(), "--missed-injection=off") {
		t.Errorf("New with the audit on and no node name: %v", err)
	}
}

// The run directory's variable had another name before: an existing
// DaemonSet (or a ConfigMap) that still sets KUBECONFIG_DIR keeps working
// for a release.
func TestOldRunDirVariableAccepted(t *testing.T) {
	n := newFakeNode(t)
	env := maps.Clone(n.env)
	delete(env, "RUN_DIR")
	env["KUBECONFIG_DIR"] = n.run
	c, err := ParseFlags(nil, func(k string) string { return env[k] }, "/")
	if err != nil || c.Install.RunDir != n.run {
		t.Errorf("KUBECONFIG_DIR=%s: run dir %q, %v", n.run, c.Install.RunDir, err)
	}
	c, err = ParseFlags([]string{"--kubeconfig-dir=/var/run/old"}, func(k string) string { return env[k] }, "/")
	if err != nil || c.Install.RunDir != "/var/run/old" {
		t.Errorf("--kubeconfig-dir: run dir %q, %v", c.Install.RunDir, err)
	}
}
