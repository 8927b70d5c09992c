package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/plugin"
)

// TestRepeatedAddFollowsItsRecord: ADDs of one sandbox after its first (a
// runtime's retry, Multus adding a network to the pod). Where the first
// wrote, a second reconciles: the rules whole, no jump twice. After the
// node's alternatives moved from legacy to nft, the rules are written in
// nft and then removed from legacy, as the first's record says it wrote
// them. An annotation edited since the first ADD changes nothing, nor
// fails the ADD when it does not parse: the rules stay those recorded. Once the pod is annotated out of the mesh,
// its rules and record stay, and CHECK passes against them.
func TestRepeatedAddFollowsItsRecord(t *testing.T) {
	name := podName(t)
	ann, ctrs := meshed(nil)
	createPod(t, "team-a", name, ann, ctrs, nil)
	uid := podUID(t, "team-a", name)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name + ";K8S_POD_UID=" + uid
	s := newSandbox(t, "team-a", name)
	records := t.TempDir()
	stdin := pluginStdin(t, "1.0.0", istioConf(map[string]any{"records_dir": records}), prevV4)
	add := func(when string) string {
		t.Helper()
		r := execPlugin(t, "ADD", stdin, s.Path(), args)
		if r.code != 0 {
			t.Fatalf("ADD %s: %d %s", when, r.code, r.msg)
		}
		return string(r.stderr)
	}
	legacy, nft := writer{"legacy", release.Legacy}, writer{"nft", release.NFT}

	alternatives(t, release.Legacy, release.Legacy)
	add("on legacy")
	add("again on legacy")
	assertRules(t, s.Path(), legacy, iptables.DefaultSpec(), false)
	assertNoRules(t, s.Path(), nft)

	alternatives(t, release.NFT, release.NFT)
	add("again, the node's iptables now nft")
	assertRules(t, s.Path(), nft, iptables.DefaultSpec(), false)
	assertNoRules(t, s.Path(), legacy)

	annotate := func(key, value string) {
		t.Helper()
		patch := []byte(`[{"op":"add","path":"/metadata/annotations/` + strings.ReplaceAll(key, "/", "~1") + `","value":"` + value + `"}]`)
		if status, body, err := env.api.Do(context.Background(), http.MethodPatch, "/api/v1/namespaces/team-a/pods/"+name, patch); err != nil || status != http.StatusOK {
			t.Fatalf("annotating the pod: %d %s %v", status, body, err)
		}
	}
	annotate("traffic.sidecar.istio.io/excludeOutboundPorts", "5432")
	if log := add("again, the pod's outbound port 5432 excluded since"); !strings.Contains(log, "OutboundExclude") {
		t.Errorf("the log does not name the edit the ADD did not write: %s", log)
	}
	assertRules(t, s.Path(), nft, iptables.DefaultSpec(), false)
	annotate("traffic.sidecar.istio.io/excludeOutboundPorts", "abc")
	if log := add("again, the pod's excluded ports edited to a value that does not parse"); !strings.Contains(log, `bad port \"abc\"`) {
		t.Errorf("the log does not say why the plan was not used: %s", log)
	}
	assertRules(t, s.Path(), nft, iptables.DefaultSpec(), false)

	annotate("sidecar.istio.io/inject", "false")
	add("again, the pod annotated out of the mesh")
	assertRules(t, s.Path(), nft, iptables.DefaultSpec(), false)
	assertNoRules(t, s.Path(), legacy)
	recs, err := applied.Store{Dir: records}.ForPod(uid)
	if err != nil || len(recs) != 1 || recs[0].Passed || recs[0].Backend != release.NFT {
		t.Errorf("records %+v, %v: want the sandbox's, programmed in nft", recs, err)
	}
	if r := execPlugin(t, "CHECK", stdin, s.Path(), args); r.code != 0 {
		t.Errorf("CHECK: %d %s", r.code, r.msg)
	}
}

// TestCheckWithoutARecordFindsTheRules: CHECK of a sandbox no record names
// a writer for (records_dir unset) reads the rules where they are, as the
// audit and inspect do: after the node's alternatives moved from legacy
// to nft, a pod ADD wrote in legacy passes; a sandbox of the same pod
// holding none fails, naming what is missing.
func TestCheckWithoutARecordFindsTheRules(t *testing.T) {
	name := podName(t)
	ann, ctrs := meshed(nil)
	createPod(t, "team-a", name, ann, ctrs, nil)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=" + name
	stdin := pluginStdin(t, "1.0.0", istioConf(nil), prevV4)
	written, empty := newSandbox(t, "team-a", name), newSandbox(t, "team-a", name)

	alternatives(t, release.Legacy, release.Legacy)
	if r := execPlugin(t, "ADD", stdin, written.Path(), args); r.code != 0 {
		t.Fatalf("ADD: %d %s", r.code, r.msg)
	}
	alternatives(t, release.NFT, release.NFT)
	if r := execPlugin(t, "CHECK", stdin, written.Path(), args); r.code != 0 {
		t.Errorf("CHECK after the node moved to nft: %d %s", r.code, r.msg)
	}
	if r := execPlugin(t, "CHECK", stdin, empty.Path(), args); r.code != plugin.ErrRulesMismatch || !strings.Contains(r.msg, "ISTIO_OUTPUT: chain missing") {
		t.Errorf("CHECK of a sandbox without rules: %d %s, want a failure naming what is missing", r.code, r.msg)
	}
}
