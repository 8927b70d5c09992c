package inspect

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

type namespaces map[string]netnsdir.NSFile

func (n namespaces) Find(pods map[string][]netip.Addr) (netnsdir.Result, error) {
	res := netnsdir.Result{Found: map[string]netnsdir.NSFile{}}
	for u := range pods {
		if v, ok := n[u]; ok {
			res.Found[u] = v
		}
	}
	return res, nil
}

func pod(annotations map[string]string) *Pod {
	return &Pod{Pod: &kube.Pod{
		Metadata: kube.ObjectMeta{Name: "web-0", Namespace: "default", UID: "u1", Annotations: annotations},
		Spec:     kube.PodSpec{Containers: []kube.Container{{Name: "app"}, {Name: "istio-proxy", Args: []string{"proxy", "sidecar"}}}},
	}, Node: "node-a", Phase: "Running"}
}

// deps serves the pod and a namespace whose iptables-save output is save.
func deps(p *Pod, save string, diffs []string) Deps {
	return Deps{
		GetPod:     func(context.Context, string, string) (*Pod, error) { return p, nil },
		Namespaces: namespaces{"u1": {Path: "/var/run/netns/cni-1", Inode: 7}},
		Observe: func(_ context.Context, _ string, _ release.Backend, f iptables.Family) (*iptables.Observed, error) {
			if f == iptables.IPv6 {
				return iptables.ParseSave(nil)
			}
			return iptables.ParseSave([]byte(save))
		},
		Check:   func(context.Context, string, iptables.Model, applied.Writer) ([]string, error) { return diffs, nil },
		HasIPv6: func(string) (bool, error) { return false, nil },
	}
}

func configDir(t *testing.T, chained bool) string {
	t.Helper()
	dir := t.TempDir()
	plugins := `[{"type":"bridge"}]`
	if chained {
		plugins = `[{"type":"bridge"},{"type":"istio-cni"}]`
	}
	if err := os.WriteFile(filepath.Join(dir, "02-istio-cni.conflist"), []byte(`{"cniVersion":"1.0.0","name":"k8s","plugins":`+plugins+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func opts(dir string) Options {
	return Options{Namespace: "default", Name: "web-0", ExcludeNamespaces: []string{"kube-system"},
		AgentNamespace: "istio-cni", Settings: decision.DefaultNodeSettings(), CNINetDir: dir}
}

func render(t *testing.T, r Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.Print(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestMeshedPodWithoutRules(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	r, err := Run(context.Background(), opts(configDir(t, false)), deps(p, "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", []string{"nat ISTIO_OUTPUT: chain missing"}))
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r)
	for _, want := range []string{
		"does NOT chain istio-cni", "decision:  redirect (ipv4)", "should have:\n  ipv4 nat -A PREROUTING -p tcp -j ISTIO_INBOUND",
		"has (istio-cni's rules only):\n  (none)", "verdict:   NOT REDIRECTED: 1 difference(s)", "nat ISTIO_OUTPUT: chain missing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if r.Consistent() {
		t.Error("consistent, want not")
	}
}

// The report opens with the build that wrote it (in the agent's pod, the
// agent's): what to quote when asking about it, and what tells a node
// still on the previous release.
func TestReportOpensWithItsBuild(t *testing.T) {
	o := opts(configDir(t, true))
	o.Build = "install-cni v1.4.0 (go1.26.0, linux/amd64)"
	r, err := Run(context.Background(), o, deps(pod(nil), "", nil))
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.HasPrefix(out, "version:   install-cni v1.4.0 (go1.26.0, linux/amd64)\npod:       default/web-0 ") {
		t.Errorf("report:\n%s\nwant it to open with the build, then the pod", out)
	}
}

func TestPodOutsideTheMeshSaysWhy(t *testing.T) {
	p := pod(nil) // no sidecar.istio.io/status
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r)
	for _, want := range []string{"chains istio-cni", "not redirected: " + string(decision.NoStatus), "verdict:   ok: not redirected"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if !r.Consistent() {
		t.Error("not consistent")
	}
}

func TestStrayRulesOnUnmeshedPod(t *testing.T) {
	p := pod(nil)
	save := "*nat\n:OUTPUT ACCEPT [0:0]\n:ISTIO_OUTPUT - [0:0]\n-A OUTPUT -p tcp -j ISTIO_OUTPUT\nCOMMIT\n"
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, save, nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Consistent() || !strings.Contains(render(t, r), "ipv4 nat -A OUTPUT -p tcp -j ISTIO_OUTPUT") {
		t.Errorf("stray rules not reported:\n%s", render(t, r))
	}
}

func TestPodNotOnThisNode(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	d := deps(p, "", nil)
	d.Namespaces = namespaces{}
	r, err := Run(context.Background(), opts(configDir(t, true)), d)
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.Contains(out, "run inspect on node node-a") || !strings.Contains(out, "verdict:   unknown") {
		t.Errorf("report:\n%s", out)
	}
}

// TestRecordedSettingsWin: a sandbox ADD recorded is held to the record;
// annotations edited since are shown as a change, not as what it should
// have.
func TestRecordedSettingsWin(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}", "traffic.sidecar.istio.io/excludeOutboundIPRanges": "0.0.0.0/0"})
	store := applied.Store{Dir: t.TempDir()}
	orig := decision.FinalSpec(decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}, decision.DefaultNodeSettings())
	if err := store.Write(applied.Record{PodUID: "u1", Pod: "default/web-0", Container: "c1", NetnsInode: 7, Spec: orig, IPv4: true}); err != nil {
		t.Fatal(err)
	}
	d := deps(p, "*nat\nCOMMIT\n", nil)
	d.Records = store
	var wanted iptables.Model
	d.Check = func(_ context.Context, _ string, m iptables.Model, _ applied.Writer) ([]string, error) {
		wanted = m
		return nil, nil
	}
	r, err := Run(context.Background(), opts(configDir(t, true)), d)
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r)
	if !r.Recorded || !strings.Contains(out, "as ADD recorded for this sandbox") || !strings.Contains(out, "settings:  changed after the pod started (OutboundIPExclude") {
		t.Errorf("report:\n%s", out)
	}
	if want := iptables.Build(orig, true, false); wanted.V4 == nil || len(wanted.V4.Rules) != len(want.V4.Rules) {
		t.Error("not checked against the recorded model")
	}
}

// TestIPv4OnlyProxyNote: a dual-stack pod whose proxy is not dual-stack.
func TestIPv4OnlyProxyNote(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	p.IPs = []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, "*nat\nCOMMIT\n", nil))
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.Contains(out, "note:      "+decision.IPv6ProxyNote) || r.Families != "ipv4,ipv6" {
		t.Errorf("report:\n%s", out)
	}
}

// A boolean proxy env var that is not true or false is read as false;
// inspect says so, and holds the pod to the rules of false.
func TestProxyEnvNotABooleanNote(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	p.Spec.Containers[1].Env = []kube.EnvVar{{Name: "INVALID_DROP", Value: "yes"}}
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, "*nat\nCOMMIT\n", nil))
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.Contains(out, "note:      "+decision.NotBoolNote([]string{"INVALID_DROP"})) || r.Invalid != "" || !r.Redirect {
		t.Errorf("report:\n%s", out)
	}
	unset, err := Run(context.Background(), opts(configDir(t, true)), deps(pod(map[string]string{decision.StatusAnnotation: "{}"}), "*nat\nCOMMIT\n", nil))
	if err != nil || len(r.Want) == 0 || !slices.Equal(r.Want, unset.Want) {
		t.Errorf("want %q, %v; want the rules of INVALID_DROP unset, %q", r.Want, err, unset.Want)
	}
}

// With no record of the sandbox, the rules an earlier build wrote for the
// pod's settings (the status port excluded outbound beside the
// annotation's) are the pod's, as the audit takes them: consistent, with
// a note saying why; other rules are not.
func TestEarlierBuildsRulesWithoutARecord(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}", "traffic.sidecar.istio.io/excludeOutboundPorts": "5432"})
	dec, err := decision.Pod(p.Pod)
	if err != nil {
		t.Fatal(err)
	}
	earlier, _ := decision.EarlierRules(dec, decision.DefaultNodeSettings(), true, false)
	for _, tc := range []struct {
		name  string
		holds iptables.Model
		ok    bool
	}{
		{"an earlier build's", earlier, true},
		{"neither", iptables.Build(iptables.DefaultSpec(), true, false), false},
	} {
		dp := deps(p, "*nat\nCOMMIT\n", nil)
		dp.Check = func(_ context.Context, _ string, m iptables.Model, _ applied.Writer) ([]string, error) {
			if reflect.DeepEqual(m, tc.holds) {
				return nil, nil
			}
			return []string{"nat ISTIO_OUTPUT: the rules differ"}, nil
		}
		r, err := Run(context.Background(), opts(configDir(t, true)), dp)
		if err != nil {
			t.Fatal(err)
		}
		if noted := slices.Contains(r.Notes, EarlierBuildNote); (len(r.Diffs) == 0) != tc.ok || noted != tc.ok {
			t.Errorf("%s: diffs %q, notes %q", tc.name, r.Diffs, r.Notes)
		}
	}
}

// A proxy env var set with valueFrom is read as unset; inspect says so.
func TestProxyEnvByReferenceNote(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	p.Spec.Containers[1].Env = []kube.EnvVar{{Name: "ISTIO_META_DNS_CAPTURE", ValueFrom: []byte(`{"fieldRef":{"fieldPath":"metadata.labels['dns']"}}`)}}
	r, err := Run(context.Background(), opts(configDir(t, true)), deps(p, "*nat\nCOMMIT\n", nil))
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.Contains(out, "note:      "+decision.UnreadNote([]string{"ISTIO_META_DNS_CAPTURE"})) || r.Invalid != "" || !r.Redirect {
		t.Errorf("report:\n%s", out)
	}
}

// A pod in a namespace labelled for injection, without istio-proxy: the
// plugin rightly leaves it alone, and inspect says it missed its sidecar.
func TestMissedInjection(t *testing.T) {
	p := pod(nil)
	p.Spec.Containers = p.Spec.Containers[:1] // the app alone
	for _, tc := range []struct {
		labels     map[string]string
		consistent bool
		want       string
	}{
		{map[string]string{"istio-injection": "enabled"}, false, "injection: missed injection: webhook namespace.sidecar-injector.istio.io (revision any) selects it and the injector injects it: the injector's policy is enabled, but the pod has no istio-proxy container"},
		{nil, true, "injection: not selected for injection"},
	} {
		d := deps(p, "", nil)
		d.NamespaceLabels = func(_ context.Context, name string) (map[string]string, error) {
			if name != "default" {
				t.Errorf("read namespace %q", name)
			}
			return tc.labels, nil
		}
		d.Injectors = func(context.Context) injection.View { return injection.ChartView("test") }
		r, err := Run(context.Background(), opts(configDir(t, true)), d)
		if err != nil {
			t.Fatal(err)
		}
		out := render(t, r)
		if !strings.Contains(out, tc.want) || r.Consistent() != tc.consistent {
			t.Errorf("labels %v: consistent %v, want %v; report lacks %q:\n%s", tc.labels, r.Consistent(), tc.consistent, tc.want, out)
		}
		if !tc.consistent && !strings.Contains(out, "verdict:   NOT IN THE MESH: created without its sidecar") {
			t.Errorf("verdict:\n%s", out)
		}
	}
}

// TestNewerRecordIsNotJudged: a sandbox a later build recorded (this agent
// rolled back) is neither held to this build's rules nor called ok:
// inspect says who can judge it.
func TestNewerRecordIsNotJudged(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "u1"), 0o700); err != nil {
		t.Fatal(err)
	}
	newer := `{"version":4,"podUID":"u1","pod":"default/web-0","container":"c1","netnsInode":7,"spec":{"tomorrow":1}}`
	if err := os.WriteFile(filepath.Join(dir, "u1", "c1.json"), []byte(newer), 0o600); err != nil {
		t.Fatal(err)
	}
	d := deps(pod(map[string]string{decision.StatusAnnotation: "{}"}), "*nat\nCOMMIT\n", nil)
	d.Records = applied.Store{Dir: dir}
	d.Check = func(context.Context, string, iptables.Model, applied.Writer) ([]string, error) {
		t.Error("checked against this build's model")
		return nil, nil
	}
	r, err := Run(context.Background(), opts(configDir(t, true)), d)
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r)
	if r.Consistent() || r.NewerRecord != 4 || !strings.Contains(out, "verdict:   unknown: a newer istio-cni") || !strings.Contains(out, "record version 4") {
		t.Errorf("consistent %v; report:\n%s", r.Consistent(), out)
	}
}

// TestNativeNftablesPod: a sandbox whose ADD wrote native nftables (its
// record says so), or any on a node whose plugin does, is shown and
// checked as nftables: the ruleset upstream's istio-nftables writes, our
// tables as the kernel holds them, CHECK asked for nftables.
func TestNativeNftablesPod(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	spec := decision.FinalSpec(decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}, decision.DefaultNodeSettings())
	for _, tc := range []struct {
		name           string
		nodeNative     bool
		recordedNative *bool // nil: no record
	}{
		{"recorded native", false, ptr(true)},
		{"native node, no record", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deps(p, "*nat\nCOMMIT\n", nil)
			if tc.recordedNative != nil {
				store := applied.Store{Dir: t.TempDir()}
				if err := store.Write(applied.Record{PodUID: "u1", Pod: "default/web-0", Container: "c1", NetnsInode: 7, Spec: spec, IPv4: true, Native: *tc.recordedNative}); err != nil {
					t.Fatal(err)
				}
				d.Records = store
			}
			d.Observe = func(context.Context, string, release.Backend, iptables.Family) (*iptables.Observed, error) {
				t.Error("iptables read for a native pod")
				return iptables.ParseSave(nil)
			}
			d.ObserveNative = func(context.Context, string, iptables.Model) ([]string, error) {
				return []string{"table inet istio-proxy-nat"}, nil
			}
			var native bool
			d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
				native = w.Native
				return nil, nil
			}
			o := opts(configDir(t, true))
			o.Writer.Native = tc.nodeNative
			r, err := Run(context.Background(), o, d)
			if err != nil {
				t.Fatal(err)
			}
			out := render(t, r)
			if !native || !r.Native || !strings.Contains(out, "rules:     native nftables") ||
				!strings.Contains(out, "meta l4proto tcp counter redirect to :15001") || !strings.Contains(out, "verdict:   ok: redirected") {
				t.Errorf("checked as native %v; report:\n%s", native, out)
			}
		})
	}
}

// A sandbox's rules are read with the iptables its record names, not the
// node's guess: on a node led to legacy whose primary's image writes
// nf_tables, the agent in its image guesses nft from the host's rules.
func TestReadsWithTheRecordedBackend(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	spec := decision.FinalSpec(decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}, decision.DefaultNodeSettings())
	for _, tc := range []struct {
		name     string
		recorded release.Backend // "": no record
		holding  release.Backend // what Deps.Holding finds; "": no Holding
		want     release.Backend
	}{
		{"recorded legacy, the node's guess nft", release.Legacy, release.Legacy, release.Legacy},
		{"recorded nft, the node's guess legacy", release.NFT, release.NFT, release.NFT},
		{"no record: the node's guess", "", "", release.NFT},
		{"no record: where the rules are found", "", release.Legacy, release.Legacy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := release.NFT
			if tc.recorded == release.NFT {
				node = release.Legacy
			}
			d := deps(p, "", nil)
			if tc.recorded != "" {
				store := applied.Store{Dir: t.TempDir()}
				if err := store.Write(applied.Record{PodUID: "u1", Pod: "default/web-0", Container: "c1", NetnsInode: 7, Spec: spec, IPv4: true, Backend: tc.recorded}); err != nil {
					t.Fatal(err)
				}
				d.Records = store
			}
			if tc.holding != "" {
				d.Holding = func(context.Context, string, iptables.Model) (applied.Writer, error) {
					if tc.recorded != "" {
						t.Error("a recorded sandbox's backend looked for")
					}
					return applied.Writer{Backend: tc.holding}, nil
				}
			}
			// The rules are in tc.want's tables only.
			save, err := iptables.Plan(iptables.Build(iptables.DefaultSpec(), true, false).Rulesets()[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			d.Observe = func(_ context.Context, _ string, b release.Backend, f iptables.Family) (*iptables.Observed, error) {
				if b != tc.want || f == iptables.IPv6 {
					return iptables.ParseSave(nil)
				}
				return iptables.ParseSave(save)
			}
			var checked []applied.Writer
			d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
				checked = append(checked, w)
				if w.Backend != tc.want && !w.Guessed { // a guess finds them
					return []string{"nat ISTIO_OUTPUT: chain missing"}, nil
				}
				return nil, nil
			}
			o := opts(configDir(t, true))
			o.Writer.Backend = node
			r, err := Run(context.Background(), o, d)
			if err != nil {
				t.Fatal(err)
			}
			out := render(t, r)
			// Checked as the audit reads it: the record's, else the
			// node's guess.
			want := []applied.Writer{{Backend: tc.want}}
			if tc.recorded == "" {
				want = []applied.Writer{{Backend: release.NFT, Guessed: true}}
			}
			if !slices.Equal(checked, want) || r.Backend != tc.want ||
				!strings.Contains(out, "rules:     iptables, "+string(tc.want)) || len(r.Have) == 0 || !strings.Contains(out, "verdict:   ok: redirected") {
				t.Errorf("checked as %v, want %v; report:\n%s", checked, want, out)
			}
			if doc := r.Document(); doc.Rules.Backend != tc.want {
				t.Errorf("JSON rules.backend %q, want %q", doc.Rules.Backend, tc.want)
			}
		})
	}
}

// A sandbox whose record puts its IPv6 rules in another backend than its
// IPv4 ones (a node whose ip6tables alternative is not its iptables') is
// read and checked family by family, as ADD wrote it.
func TestReadsEachFamilyWithItsRecordedBackend(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	spec := decision.FinalSpec(decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}, decision.DefaultNodeSettings())
	d := deps(p, "", nil)
	store := applied.Store{Dir: t.TempDir()}
	if err := store.Write(applied.Record{PodUID: "u1", Pod: "default/web-0", Container: "c1", NetnsInode: 7, Spec: spec, IPv4: true, IPv6: true,
		Backend: release.NFT, BackendIPv6: release.Legacy}); err != nil {
		t.Fatal(err)
	}
	d.Records = store
	saves := map[iptables.Family][]byte{}
	for _, rs := range iptables.Build(spec, true, true).Rulesets() {
		save, err := iptables.Plan(rs, nil)
		if err != nil {
			t.Fatal(err)
		}
		saves[rs.Family] = save
	}
	at := map[iptables.Family]release.Backend{iptables.IPv4: release.NFT, iptables.IPv6: release.Legacy}
	d.Observe = func(_ context.Context, _ string, b release.Backend, f iptables.Family) (*iptables.Observed, error) {
		if b != at[f] {
			return iptables.ParseSave(nil)
		}
		return iptables.ParseSave(saves[f])
	}
	var checked []applied.Writer
	d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
		checked = append(checked, w)
		return nil, nil
	}
	o := opts(configDir(t, true))
	o.Writer.Backend = release.NFT
	r, err := Run(context.Background(), o, d)
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, r)
	want := []applied.Writer{{Backend: release.NFT, BackendIPv6: release.Legacy}}
	if !slices.Equal(checked, want) || !strings.Contains(out, "rules:     iptables, nft (IPv6: legacy)") || !strings.Contains(out, "verdict:   ok: redirected") {
		t.Errorf("checked as %v, want %v; report:\n%s", checked, want, out)
	}
	for _, f := range []string{"ipv4 ", "ipv6 "} {
		if !slices.ContainsFunc(r.Have, func(l string) bool { return strings.HasPrefix(l, f) }) {
			t.Errorf("has no %srules: the family read from the other backend\n%s", f, out)
		}
	}
	if doc := r.Document(); doc.Rules.Backend != release.NFT || doc.Rules.BackendIPv6 != release.Legacy {
		t.Errorf("JSON rules.backend %q, backendIPv6 %q; want nft, legacy", doc.Rules.Backend, doc.Rules.BackendIPv6)
	}
}

// A pod not to be redirected, with no record, holding chains of ours in
// the backend the node does not guess: stray rules, not "ok".
func TestStrayRulesInTheOtherBackend(t *testing.T) {
	p := pod(nil)
	p.Spec.Containers = p.Spec.Containers[:1] // no istio-proxy
	save, err := iptables.Plan(iptables.Build(iptables.DefaultSpec(), true, false).Rulesets()[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []release.Backend{release.NFT, release.Legacy} {
		t.Run("in "+string(in), func(t *testing.T) {
			d := deps(p, "", nil)
			d.Observe = func(_ context.Context, _ string, b release.Backend, f iptables.Family) (*iptables.Observed, error) {
				if b != in || f == iptables.IPv6 {
					return iptables.ParseSave(nil)
				}
				return iptables.ParseSave(save)
			}
			o := opts(configDir(t, true))
			o.Writer.Backend = release.NFT
			r, err := Run(context.Background(), o, d)
			if err != nil {
				t.Fatal(err)
			}
			if v := r.Verdict(); v.Code != VerdictStrayRules || r.Backend != in {
				t.Errorf("verdict %s, read with %s; want %s with %s\n%s", v.Code, r.Backend, VerdictStrayRules, in, render(t, r))
			}
		})
	}
}

// An unmeshed pod's stray rules are found family by family: each in the
// backend the node's guess names for it, else in the other one, and the
// report says where each was read.
func TestStrayRulesOfEachFamily(t *testing.T) {
	p := pod(nil)
	p.Spec.Containers = p.Spec.Containers[:1] // no istio-proxy
	saves := map[iptables.Family][]byte{}
	for _, rs := range iptables.Build(iptables.DefaultSpec(), true, true).Rulesets() {
		save, err := iptables.Plan(rs, nil)
		if err != nil {
			t.Fatal(err)
		}
		saves[rs.Family] = save
	}
	for _, tc := range []struct {
		name string
		node applied.Writer // the node's writer, guessed for the pod
		at   applied.Writer // where the stray rules are
		// unreadableV6: IPv6's rules cannot be read in this backend
		// (a node with no ip6tables-legacy, say).
		unreadableV6 release.Backend
	}{
		{"split node, both in the other backend", applied.Writer{Backend: release.NFT, BackendIPv6: release.Legacy}, applied.Writer{Backend: release.Legacy, BackendIPv6: release.NFT}, ""},
		{"IPv6 in the other backend", applied.Writer{Backend: release.NFT}, applied.Writer{Backend: release.NFT, BackendIPv6: release.Legacy}, ""},
		{"IPv4 in the other backend", applied.Writer{Backend: release.Legacy}, applied.Writer{Backend: release.NFT, BackendIPv6: release.Legacy}, ""},
		{"IPv6 unreadable in the guessed backend, in the other", applied.Writer{Backend: release.Legacy}, applied.Writer{Backend: release.Legacy, BackendIPv6: release.NFT}, release.Legacy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deps(p, "", nil)
			d.Observe = func(_ context.Context, _ string, b release.Backend, f iptables.Family) (*iptables.Observed, error) {
				if f == iptables.IPv6 && b == tc.unreadableV6 {
					return nil, errors.New("ip6tables-" + string(b) + "-save: not found")
				}
				if b != tc.at.For(f) {
					return iptables.ParseSave(nil)
				}
				return iptables.ParseSave(saves[f])
			}
			o := opts(configDir(t, true))
			o.Writer = tc.node
			r, err := Run(context.Background(), o, d)
			if err != nil {
				t.Fatal(err)
			}
			out := render(t, r)
			if v := r.Verdict(); v.Code != VerdictStrayRules || r.Backend != tc.at.Backend || r.BackendIPv6 != tc.at.BackendIPv6 {
				t.Errorf("verdict %s, read with %s (IPv6 %q); want %s with %s (IPv6 %q)\n%s", v.Code, r.Backend, r.BackendIPv6, VerdictStrayRules, tc.at.Backend, tc.at.BackendIPv6, out)
			}
			for _, f := range []string{"ipv4 ", "ipv6 "} {
				if !slices.ContainsFunc(r.Have, func(l string) bool { return strings.HasPrefix(l, f) }) {
					t.Errorf("lists no %sstray rules\n%s", f, out)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A sandbox with no record whose rules are the other kind than the node's
// plugin writes (switched from upstream's istio-cni with another
// global.nativeNftables) is read and shown as that kind wrote it, and is
// redirected, as the audit takes it.
func TestOtherKindWithoutARecord(t *testing.T) {
	p := pod(map[string]string{decision.StatusAnnotation: "{}"})
	save, err := iptables.Plan(iptables.Build(iptables.DefaultSpec(), true, false).Rulesets()[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		nodeNative bool
		rules      string // what the report says of the rules
		have       string // a rule it lists as there
	}{
		{"native node, iptables rules", true, "rules:     iptables, legacy", "ipv4 nat -A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001"},
		{"iptables node, native rules", false, "rules:     native nftables", "table inet istio-proxy-nat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deps(p, "", nil)
			d.Holding = func(context.Context, string, iptables.Model) (applied.Writer, error) {
				return applied.Writer{Backend: release.Legacy}, nil
			}
			d.Observe = func(_ context.Context, _ string, b release.Backend, f iptables.Family) (*iptables.Observed, error) {
				if !tc.nodeNative || b != release.Legacy || f == iptables.IPv6 {
					return iptables.ParseSave(nil)
				}
				return iptables.ParseSave(save)
			}
			d.ObserveNative = func(context.Context, string, iptables.Model) ([]string, error) {
				if tc.nodeNative {
					return nil, nil
				}
				return []string{"table inet istio-proxy-nat"}, nil
			}
			d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
				if w.Native == tc.nodeNative {
					return []string{"missing"}, nil
				}
				return nil, nil
			}
			o := opts(configDir(t, true))
			o.Writer = applied.Writer{Backend: release.NFT, Native: tc.nodeNative}
			r, err := Run(context.Background(), o, d)
			if err != nil {
				t.Fatal(err)
			}
			out := render(t, r)
			if r.Native == tc.nodeNative || !slices.Contains(r.Notes, OtherKindNote) || !slices.Contains(r.Have, tc.have) ||
				!strings.Contains(out, tc.rules) || !strings.Contains(out, "verdict:   ok: redirected") {
				t.Errorf("report:\n%s", out)
			}
		})
	}
	// Whole as iptables on a native node, which backend holds them
	// unreadable: still reported as iptables, with the note and the error.
	d := deps(p, "", nil)
	d.Holding = func(context.Context, string, iptables.Model) (applied.Writer, error) {
		return applied.Writer{}, errors.New("iptables-legacy-save: exit status 4")
	}
	d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
		if w.Native {
			return []string{"missing"}, nil
		}
		return nil, nil
	}
	o := opts(configDir(t, true))
	o.Writer = applied.Writer{Backend: release.NFT, Native: true}
	r, err := Run(context.Background(), o, d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Native || !slices.Contains(r.Notes, OtherKindNote) || !strings.Contains(r.NetnsErr, "iptables-legacy-save: exit status 4") {
		t.Errorf("the backend unreadable, report:\n%s", render(t, r))
	}
	// Read as neither, the other kind's read failing: the report says why.
	d = deps(p, "", nil)
	d.Check = func(_ context.Context, _ string, _ iptables.Model, w applied.Writer) ([]string, error) {
		if w.Native {
			return nil, errors.New("netlink receive: interrupted system call")
		}
		return []string{"missing"}, nil
	}
	o = opts(configDir(t, true))
	o.Writer = applied.Writer{Backend: release.NFT}
	r, err = Run(context.Background(), o, d)
	if err != nil {
		t.Fatal(err)
	}
	if out := render(t, r); !strings.Contains(out, "reading its rules as native nftables failed: netlink receive: interrupted system call") || strings.Contains(out, "ok: redirected") {
		t.Errorf("the other kind's read failing, report:\n%s", out)
	}
}
