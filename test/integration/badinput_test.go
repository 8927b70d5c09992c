package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/plugin"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/podsim"
)

var prevV4 = map[string]any{
	"cniVersion": "1.0.0",
	"interfaces": []any{map[string]any{"name": "eth0"}},
	"ips":        []any{map[string]any{"address": "198.51.100.77/24", "interface": 0}},
}

// kubeconfigWith writes a kubeconfig for the test API server with a token,
// or for an address where nothing answers.
func kubeconfigWith(t *testing.T, token string, unreachable bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.api.Kubeconfig(path, token); err != nil {
		t.Fatal(err)
	}
	if unreachable {
		b, _ := os.ReadFile(path)
		b = []byte(strings.ReplaceAll(string(b), env.api.URL, "https://127.0.0.1:1"))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestBadInput: each failure gets its CNI error code and leaves the pod's
// namespace without any rule of ours.
func TestBadInput(t *testing.T) {
	name := "bad-input-meshed"
	ann, ctrs := meshed(nil)
	createPod(t, "team-a", name, ann, ctrs, nil)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name
	good := istioConf(nil)
	with := func(k string, v any) map[string]any {
		c := istioConf(nil)
		c[k] = v
		return c
	}
	for _, tc := range []struct {
		name    string
		command string
		stdin   []byte
		noNetns bool
		args    string
		code    uint
		msg     string
	}{
		{"malformed stdin", "ADD", []byte(`{"cniVersion":"1.0.0",`), false, args, types.ErrDecodingFailure, ""},
		{"wrong cniVersion", "ADD", pluginStdin(t, "9.9.9", good, nil), false, args, types.ErrIncompatibleCNIVersion, ""},
		{"missing CNI_NETNS", "ADD", pluginStdin(t, "1.0.0", good, prevV4), true, args, types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"CHECK without prevResult", "CHECK", pluginStdin(t, "1.0.0", good, nil), false, args, types.ErrInvalidNetworkConfig, "prevResult"},
		{"wrong field type", "ADD", pluginStdin(t, "1.0.0", with("exclude_namespaces", "kube-system"), prevV4), false, args, types.ErrInvalidNetworkConfig, "exclude_namespaces"},
		{"API down", "ADD", pluginStdin(t, "1.0.0", with("kubeconfig", kubeconfigWith(t, cluster.PluginToken, true)), prevV4), false, args, types.ErrTryAgainLater, "team-a/" + name},
		{"pod not found", "ADD", pluginStdin(t, "1.0.0", good, prevV4), false, "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=ghost", plugin.ErrPodNotFound, "team-a/ghost"},
		{"401", "ADD", pluginStdin(t, "1.0.0", with("kubeconfig", kubeconfigWith(t, "wrong-token", false)), prevV4), false, args, plugin.ErrAPIDenied, "401"},
		{"403", "ADD", pluginStdin(t, "1.0.0", with("kubeconfig", kubeconfigWith(t, cluster.NobodyToken, false)), prevV4), false, args, plugin.ErrAPIDenied, "403"},
		{"missing kubeconfig", "ADD", pluginStdin(t, "1.0.0", with("kubeconfig", "/nonexistent/kubeconfig"), prevV4), false, args, types.ErrTryAgainLater, "/nonexistent/kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, "team-a", name)
			netns := s.Path()
			if tc.noNetns {
				netns = ""
			}
			r := execPlugin(t, tc.command, tc.stdin, netns, tc.args)
			if r.code != tc.code || !strings.Contains(r.msg, tc.msg) {
				t.Fatalf("%s: code %d %q, want code %d naming %q\nstderr: %s", tc.command, r.code, r.msg, tc.code, tc.msg, r.stderr)
			}
			assertNoRules(t, s.Path(), autoWriter)
		})
	}
}

// TestAddTwiceAndDelAnywhere: a repeated ADD gives the same rules, and DEL
// succeeds however often and whatever is missing.
func TestAddTwiceAndDelAnywhere(t *testing.T) {
	name := "add-twice"
	ann, ctrs := meshed(nil)
	createPod(t, "team-a", name, ann, ctrs, nil)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name
	s := newSandbox(t, "team-a", name)
	stdin := pluginStdin(t, "1.0.0", istioConf(nil), prevV4)
	for i := 0; i < 2; i++ {
		r := execPlugin(t, "ADD", stdin, s.Path(), args)
		if r.code != 0 {
			t.Fatalf("ADD #%d: %d %s", i+1, r.code, r.msg)
		}
		var res map[string]any
		if err := json.Unmarshal(r.stdout, &res); err != nil || res["ips"] == nil {
			t.Fatalf("ADD #%d result %s: prevResult not passed through", i+1, r.stdout)
		}
	}
	assertRules(t, s.Path(), autoWriter, iptables.DefaultSpec(), false)
	for _, netns := range []string{s.Path(), s.Path(), "", "/var/run/netns/does-not-exist"} {
		if r := execPlugin(t, "DEL", stdin, netns, args); r.code != 0 {
			t.Errorf("DEL in %q: %d %s", netns, r.code, r.msg)
		}
	}
	if r := execPlugin(t, "DEL", []byte(`{"cniVersion":"1.0.0","name":"x","log_level":7}`), s.Path(), args); r.code != 0 {
		t.Errorf("DEL with a bad config: %d %s", r.code, r.msg)
	}
	assertNoRules(t, s.Path(), autoWriter)
}

// TestStatusAndGC: STATUS, through the shim and the full plugin as a
// runtime runs them, fails only for what fails plain pods too: a config
// that does not parse, no full plugin beside the shim. Never for a
// kubeconfig that is not there (after a reboot, until the agent writes it):
// containerd would make the node NotReady. GC has nothing to do.
func TestStatusAndGC(t *testing.T) {
	for _, tc := range []struct {
		conf map[string]any
		code uint
	}{
		{istioConf(nil), 0},
		{istioConf(map[string]any{"kubeconfig": "/nonexistent/kubeconfig"}), 0},
		{istioConf(map[string]any{"log_level": "loud"}), types.ErrInvalidNetworkConfig},
	} {
		for _, verb := range []string{"STATUS", "GC"} {
			if r := execPlugin(t, verb, pluginStdin(t, "1.1.0", tc.conf, nil), "", ""); r.code != tc.code {
				t.Errorf("%s with kubeconfig %v, log_level %v: code %d %s, want %d", verb, tc.conf["kubeconfig"], tc.conf["log_level"], r.code, r.msg, tc.code)
			}
		}
	}
	// The shim alone, its full plugin not installed beside it.
	alone := filepath.Join(t.TempDir(), chain.PluginType)
	shim, err := os.ReadFile(filepath.Join(env.binDir, chain.PluginType)) // #nosec G304 -- the built shim
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, shim, 0o755); err != nil { // #nosec G306 -- an executable
		t.Fatal(err)
	}
	cmd := podsim.PluginCommand(alone, "STATUS", "", "", pluginStdin(t, "1.1.0", istioConf(nil), nil))
	if out, err := cmd.Output(); err == nil || !strings.Contains(string(out), "istio-cni-full") {
		t.Errorf("STATUS of a shim without its full plugin: %v, %s; want a CNI error naming istio-cni-full", err, out)
	}
	gc := istioConf(map[string]any{"cni.dev/valid-attachments": []any{}})
	if r := execPlugin(t, "GC", pluginStdin(t, "1.1.0", gc, nil), "", ""); r.code != 0 {
		t.Errorf("GC: %d %s", r.code, r.msg)
	}
	if r := execPlugin(t, "VERSION", []byte(`{"cniVersion":"1.1.0"}`), "", ""); r.code != 0 || !strings.Contains(string(r.stdout), "1.1.0") {
		t.Errorf("VERSION: %s", r.stdout)
	}
}
