package chain_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/pkg/chain"
)

// Entries of the three istio-cni kinds: upstream Istio's (its installer's
// keys), an earlier release of ours (the legacy type, no such key), and
// this release's.
const (
	upstreamEntryJSON = `{"type":"istio-cni","name":"istio-cni","cni_agent_run_dir":"/var/run/istio-cni","plugin_log_level":"info","pod_namespace":"istio-system"}`
	legacyEntryJSON   = `{"type":"istio-cni","kubeconfig":"/var/run/istio-cni/istio-cni-kubeconfig","exclude_namespaces":[]}`
)

func list(plugins ...string) []byte {
	raws := make([]json.RawMessage, len(plugins))
	for i, p := range plugins {
		raws[i] = json.RawMessage(p)
	}
	out, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "net", "plugins": raws})
	if err != nil {
		panic(err)
	}
	return out
}

func types(t *testing.T, data []byte) []string {
	t.Helper()
	var c struct {
		Plugins []struct {
			Type           string `json:"type"`
			CNIAgentRunDir string `json:"cni_agent_run_dir"`
		}
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range c.Plugins {
		if p.CNIAgentRunDir != "" {
			out = append(out, p.Type+"(upstream)")
		} else {
			out = append(out, p.Type)
		}
	}
	return out
}

// TestOwnedBesideUpstream: the copy never runs upstream's plugin from the
// primary (upstream's installer may delete its binary at any moment, after
// taking its entry out of the primary, not out of our copy), nor an
// earlier release's entry; it keeps upstream's entry where upstream's
// installer put it, in our own file, after ours; and Verify holds that
// file as it is.
func TestOwnedBesideUpstream(t *testing.T) {
	bridge := `{"type":"bridge"}`
	primary := &chain.Primary{Name: "10-bridge.conflist", Data: list(bridge, legacyEntryJSON, `{"type":"portmap"}`, upstreamEntryJSON)}
	got, err := chain.Owned(primary, testEntry, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bridge", "portmap", chain.PluginType}; !slices.Equal(types(t, got), want) {
		t.Errorf("owned from a primary with upstream's and an old entry: %v, want %v", types(t, got), want)
	}
	// Upstream's installer started after ours and chained into our file.
	current := list(bridge, `{"type":"portmap"}`, upstreamEntryJSON)
	got, err = chain.Owned(primary, testEntry, current)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bridge", "portmap", chain.PluginType, "istio-cni(upstream)"}; !slices.Equal(types(t, got), want) {
		t.Errorf("owned with upstream's entry in our file: %v, want %v", types(t, got), want)
	}
	if err := chain.Verify(got, primary, testEntry, true); err != nil {
		t.Errorf("Verify of our file with upstream's entry after ours: %v", err)
	}
	if _, err := libcni.NetworkConfFromBytes(got); err != nil {
		t.Errorf("libcni rejects the output: %v", err)
	}
}

// TestInplaceBesideUpstream: in the primary's own file upstream's entry
// stays (after ours), an earlier release's of ours goes.
func TestInplaceBesideUpstream(t *testing.T) {
	p := &chain.Primary{Name: "10-bridge.conflist", Data: list(`{"type":"bridge"}`, upstreamEntryJSON, legacyEntryJSON)}
	got, err := chain.Inplace(p, testEntry, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bridge", chain.PluginType, "istio-cni(upstream)"}; !slices.Equal(types(t, got), want) {
		t.Errorf("inplace beside upstream: %v, want %v", types(t, got), want)
	}
	again, err := chain.Inplace(&chain.Primary{Name: p.Name, Data: got}, testEntry, true)
	if err != nil || string(again) != string(got) {
		t.Errorf("inplace on its own output changed it (%v):\n%s\nto\n%s", err, got, again)
	}
}

// TestWhoseEntry: HasEntry and WithoutOurEntry know ours of any release,
// and leave upstream's alone.
func TestWhoseEntry(t *testing.T) {
	ours, err := chain.Owned(&chain.Primary{Name: "10-b.conflist", Data: list(`{"type":"bridge"}`)}, testEntry, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		data     []byte
		has      bool
		upstream bool
		without  []string
	}{
		{"ours", ours, true, false, []string{"bridge"}},
		{"legacy", list(`{"type":"bridge"}`, legacyEntryJSON), true, false, []string{"bridge"}},
		{"upstream", list(`{"type":"bridge"}`, upstreamEntryJSON), false, true, []string{"bridge", "istio-cni(upstream)"}},
		{"both", list(`{"type":"bridge"}`, `{"type":"`+chain.PluginType+`","kubeconfig":"/k"}`, upstreamEntryJSON), true, true, []string{"bridge", "istio-cni(upstream)"}},
		{"standalone legacy", []byte(legacyEntryJSON), true, false, nil},
		{"standalone upstream", []byte(upstreamEntryJSON), false, true, nil},
	} {
		if got := chain.HasEntry(tc.data); got != tc.has {
			t.Errorf("%s: HasEntry = %v, want %v", tc.name, got, tc.has)
		}
		if got := chain.UpstreamEntry(tc.data); got != tc.upstream {
			t.Errorf("%s: UpstreamEntry = %v, want %v", tc.name, got, tc.upstream)
		}
		if tc.without == nil {
			continue
		}
		out, err := chain.WithoutOurEntry(tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := types(t, out); !slices.Equal(got, tc.without) {
			t.Errorf("%s: WithoutOurEntry leaves %v, want %v", tc.name, got, tc.without)
		}
	}
}

// TestUpstreamEntryDropped: once upstream's binary is gone its entry, in
// our file or the primary, is dropped (a config naming a missing binary
// fails every pod), and Verify asks for that.
func TestUpstreamEntryDropped(t *testing.T) {
	p := &chain.Primary{Name: "10-bridge.conflist", Data: list(`{"type":"bridge"}`, upstreamEntryJSON)}
	got, err := chain.Inplace(p, testEntry, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bridge", chain.PluginType}; !slices.Equal(types(t, got), want) {
		t.Errorf("inplace without upstream's binary: %v, want %v", types(t, got), want)
	}
	withUpstream := list(`{"type":"bridge"}`, `{"type":"`+chain.PluginType+`","kubeconfig":"/etc/cni/net.d/ZZZ-istio-cni-kubeconfig","exclude_namespaces":["kube-system"],"log_level":"info","capabilities":{"io.kubernetes.cri.pod-annotations":true}}`, upstreamEntryJSON)
	if err := chain.Verify(withUpstream, &chain.Primary{Name: "10-bridge.conflist", Data: list(`{"type":"bridge"}`)}, testEntry, false); err == nil {
		t.Error("Verify keeps upstream's entry with its binary gone")
	}
}

// TestHasLegacyEntry: an earlier release's entry, at any depth (Multus
// nests its delegates), and not upstream's.
func TestHasLegacyEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want bool
	}{
		{"legacy in a list", string(list(`{"type":"bridge"}`, legacyEntryJSON)), true},
		{"legacy alone", legacyEntryJSON, true},
		{"upstream's", string(list(`{"type":"bridge"}`, upstreamEntryJSON)), false},
		{"this release's", string(list(`{"type":"bridge"}`, `{"type":"`+chain.PluginType+`"}`)), false},
		{"in a Multus delegate", `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","delegates":[` + string(list(`{"type":"bridge"}`, legacyEntryJSON)) + `]}`, true},
		{"not JSON", `{"type":`, true},
	} {
		if got := chain.HasLegacyEntry([]byte(tc.data)); got != tc.want {
			t.Errorf("%s: HasLegacyEntry = %v, want %v", tc.name, got, tc.want)
		}
	}
}
