package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/test/podsim"
)

// execResult is one run of the plugin binary.
type execResult struct {
	stdout []byte
	stderr []byte
	code   uint   // CNI error code, 0 on success
	msg    string // CNI error message
}

// execPlugin runs the plugin binary as a runtime does: CNI_* environment,
// the network config on stdin. An empty netns leaves CNI_NETNS unset.
func execPlugin(t *testing.T, command string, stdin []byte, netns, cniArgs string) execResult {
	t.Helper()
	cmd := podsim.PluginCommand(filepath.Join(env.binDir, chain.PluginType), command, netns, cniArgs, stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := execResult{stdout: out.Bytes(), stderr: errb.Bytes()}
	if err != nil {
		var e struct {
			Code uint   `json:"code"`
			Msg  string `json:"msg"`
		}
		if jerr := json.Unmarshal(out.Bytes(), &e); jerr != nil || e.Code == 0 {
			t.Fatalf("plugin failed without a CNI error: %v\nstdout: %s\nstderr: %s", err, out.Bytes(), errb.Bytes())
		}
		r.code, r.msg = e.Code, e.Msg
	}
	return r
}

// pluginStdin is the config the runtime passes to the plugin: its entry of
// the conflist plus name, cniVersion and the previous result.
func pluginStdin(t *testing.T, version string, istio map[string]any, prevResult any) []byte {
	t.Helper()
	c := map[string]any{"cniVersion": version, "name": "itest"}
	for k, v := range istio {
		c[k] = v
	}
	if prevResult != nil {
		c["prevResult"] = prevResult
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readRules reads a family's tables from a namespace with a backend.
func readRules(t *testing.T, path string, b release.Backend, f iptables.Family) *iptables.Observed {
	t.Helper()
	netns, err := ns.GetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	var obs *iptables.Observed
	err = netns.Do(func(ns.NetNS) error {
		var err error
		obs, err = (&xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: b}).Read(context.Background(), f)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// expectPrefix checks the line a connection returned (testproxy replies
// start with who answered).
func expectPrefix(t *testing.T, got, want string) {
	t.Helper()
	if !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
}

// podUID is a stored pod's uid.
func podUID(t *testing.T, ns, name string) string {
	t.Helper()
	status, body, err := env.api.Do(context.Background(), http.MethodGet, "/api/v1/namespaces/"+ns+"/pods/"+name, nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET pod %s/%s: %d %v", ns, name, status, err)
	}
	var pod struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &pod); err != nil || pod.Metadata.UID == "" {
		t.Fatalf("no uid in %s", body)
	}
	return pod.Metadata.UID
}
