package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/test/podsim"
)

// upstreamPlugin is upstream istio-cni's plugin, built from its module
// (make _output/tools/upstream-istio-cni; make test builds it).
const upstreamPlugin = "../../_output/tools/upstream-istio-cni"

// TestUpstreamRulesForInjectedAnnotations: for a pod as Istio's injector
// annotates it when the mesh sets global.proxy.excludeOutboundPorts, the
// rules the plugin records are exactly those upstream's plugin writes for
// the same pod: the audit then finds a pod switched from upstream as it
// should be, and a pod started here holds what upstream would have given
// it. Upstream takes the annotation, once set, as the whole outbound
// exclude list: no status port; and a boolean proxy setting that is not
// true or false as false.
func TestUpstreamRulesForInjectedAnnotations(t *testing.T) {
	if _, err := os.Stat(upstreamPlugin); err != nil {
		t.Fatalf("upstream's plugin (make _output/tools/upstream-istio-cni): %v", err)
	}
	name := podName(t)
	ann, ctrs := meshed(map[string]string{
		"traffic.sidecar.istio.io/includeInboundPorts":     "*",
		"traffic.sidecar.istio.io/excludeInboundPorts":     "",
		"traffic.sidecar.istio.io/includeOutboundIPRanges": "*",
		"traffic.sidecar.istio.io/excludeOutboundIPRanges": "",
		"traffic.sidecar.istio.io/excludeOutboundPorts":    "5432,9092",
	})
	// Settings that are not booleans, which the proxy and upstream read
	// as false.
	ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_META_DNS_CAPTURE", "value": "yes"}, {"name": "INVALID_DROP", "value": "on"}}
	createPod(t, "team-a", name, ann, ctrs, nil)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name + ";K8S_POD_UID=" + podUID(t, "team-a", name)

	// Ours, with its record.
	records := t.TempDir()
	ours := newSandbox(t, "team-a", name)
	if r := execPlugin(t, "ADD", pluginStdin(t, "1.0.0", istioConf(map[string]any{"records_dir": records}), prevV4), ours.Path(), args); r.code != 0 {
		t.Fatalf("ADD: %d %s", r.code, r.msg)
	}
	recs, err := applied.Store{Dir: records}.ForPod(podUID(t, "team-a", name))
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %+v, %v", recs, err)
	}

	theirs := newSandbox(t, "team-a", name)
	upstreamAdd(t, theirs, args, nil)

	rs := iptables.BuildFamily(recs[0].Spec, iptables.IPv4)
	read := 0
	for _, b := range []release.Backend{release.NFT, release.Legacy} {
		obs := readRules(t, theirs.Path(), b, iptables.IPv4)
		if obs.Empty() {
			continue
		}
		read++
		if d := iptables.Diff(&rs, obs); len(d) > 0 {
			t.Errorf("upstream's rules (%s) differ from the ones this plugin recorded for the pod: %v", b, d)
		}
	}
	if read != 1 {
		t.Errorf("upstream's rules found in %d backends, want 1", read)
	}
}

// upstreamAdd runs upstream's plugin's ADD in s after the primary (it
// refuses a namespace without an address), its entry as upstream's
// installer writes it with extra added.
func upstreamAdd(t *testing.T, s *podsim.Sandbox, cniArgs string, extra map[string]any) {
	t.Helper()
	n := newNetwork(t)
	mustAdd(t, n, s, conflist(t, n, "1.0.0", nil))
	// Upstream reads its kubeconfig from its run directory.
	runDir := t.TempDir()
	kc, err := os.ReadFile(env.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runDir, "istio-cni-kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	ips := []any{map[string]any{"address": s.V4.String() + "/24", "interface": 0}}
	if s.V6.IsValid() {
		ips = append(ips, map[string]any{"address": s.V6.String() + "/64", "interface": 0})
	}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "itest", "type": "istio-cni",
		"plugin_log_level": "info", "cni_agent_run_dir": runDir, "pod_namespace": "istio-system",
		"kubernetes": map[string]any{"kubeconfig": env.kubeconfig, "cni_bin_dir": filepath.Dir(upstreamPlugin)},
		"prevResult": map[string]any{
			"cniVersion": "1.0.0", "interfaces": []any{map[string]any{"name": "eth0"}},
			"ips": ips,
		},
	}
	for k, v := range extra {
		conf[k] = v
	}
	entry, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := podsim.PluginCommand(upstreamPlugin, "ADD", s.Path(), cniArgs, entry)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("upstream's ADD: %v: %s", err, out)
	}
}
