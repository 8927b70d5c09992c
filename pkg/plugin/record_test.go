package plugin

import (
	"context"
	"errors"
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
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/podnet"
)

func confWithRecords(dir string) string {
	return strings.TrimSuffix(conf("1.0.0", prevV4), "}") + `,"records_dir":"` + dir + `"}`
}

// TestRecordLifecycle: ADD records what it programmed, CHECK compares the
// namespace with the record (not with annotations edited since), DEL
// removes it.
func TestRecordLifecycle(t *testing.T) {
	h := newHarness()
	dir := t.TempDir() // the installer makes it
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	c := confWithRecords(dir)
	if err := h.p.Add(cmdArgs(c, podArgsUID)); err != nil {
		t.Fatal(err)
	}
	store := applied.Store{Dir: dir}
	recs, err := store.ForPod("0d5e2f4c-aaaa-bbbb-cccc-444455556666")
	if err != nil || len(recs) != 1 || recs[0].Container != "c1" || recs[0].Pod != "team-a/web-1" || !recs[0].IPv4 || recs[0].IPv6 {
		t.Fatalf("records %+v, %v", recs, err)
	}
	if got, _ := recs[0].Model(); !reflect.DeepEqual(got, h.net.programmed["/var/run/netns/pod"]) {
		t.Error("the record's model is not what ADD programmed")
	}
	// Annotations edited after the start (here: invalid now) do not
	// change what CHECK expects, and CHECK needs no API call.
	h.api.pods["team-a/web-1"] = meshedPod(map[string]string{"traffic.sidecar.istio.io/includeInboundPorts": "nope"})
	calls := h.api.calls
	if err := h.p.Check(cmdArgs(c, podArgsUID)); err != nil {
		t.Fatalf("CHECK against the record: %v", err)
	}
	if h.api.calls != calls {
		t.Error("CHECK read the pod although ADD recorded its rules")
	}
	if err := h.p.Del(cmdArgs(c, podArgsUID)); err != nil {
		t.Fatal(err)
	}
	if recs, _ := store.ForPod("0d5e2f4c-aaaa-bbbb-cccc-444455556666"); len(recs) != 0 {
		t.Errorf("DEL left %d records", len(recs))
	}
}

// TestRecordWriteFailureKeepsADD: a records directory that cannot be
// written costs the record, not the pod's start.
func TestRecordWriteFailureKeepsADD(t *testing.T) {
	h := newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(confWithRecords("/proc/no-such-dir/sandboxes"), podArgsUID)); err != nil {
		t.Fatalf("ADD failed on a record write: %v", err)
	}
	if !strings.Contains(h.stderr.String(), "recording the applied rules") {
		t.Errorf("the failed record is not logged: %s", h.stderr)
	}
}

// A sandbox in an excluded namespace is recorded too (passed through), so
// its DEL removes that record: none is left behind for the agent to prune.
func TestDelRemovesAnExcludedNamespacesRecord(t *testing.T) {
	h := newHarness()
	dir := t.TempDir() // the installer makes it
	a := cmdArgs(confWithRecords(dir), strings.Replace(podArgsUID, "K8S_POD_NAMESPACE=team-a", "K8S_POD_NAMESPACE=kube-system", 1))
	a.Netns = t.TempDir() // any existing path: the record keys it by inode
	if err := h.p.Add(a); err != nil {
		t.Fatal(err)
	}
	store := applied.Store{Dir: dir}
	if recs, _ := store.ForPod("0d5e2f4c-aaaa-bbbb-cccc-444455556666"); len(recs) != 1 || !recs[0].Passed {
		t.Fatalf("after ADD: %+v, want one pass-through record", recs)
	}
	if err := h.p.Del(a); err != nil {
		t.Fatal(err)
	}
	if recs, _ := store.ForPod("0d5e2f4c-aaaa-bbbb-cccc-444455556666"); len(recs) != 0 {
		t.Errorf("DEL left %d record(s) of an excluded-namespace sandbox", len(recs))
	}
}

// TestCheckUnderCNI11NeedsNoMeshForAPlainPod: CHECK with a 1.1.0 config
// and prevResult. A sandbox ADD passed through passes with no lookup, so
// no plain pod's CHECK depends on the API or the agent; a meshed one is
// held to its record; one whose record a later build wrote (this plugin
// rolled back) passes, saying it was not checked.
func TestCheckUnderCNI11NeedsNoMeshForAPlainPod(t *testing.T) {
	const prev11 = `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}`
	dir := t.TempDir()
	c := strings.TrimSuffix(conf("1.1.0", prev11), "}") + `,"records_dir":"` + dir + `"}`
	h := newHarness()
	plain := meshedPod(nil)
	plain.Metadata.Annotations = nil
	plain.Spec.Containers = plain.Spec.Containers[:1]
	h.api.pods["team-a/web-1"] = plain
	if err := h.p.Add(cmdArgs(c, podArgsUID)); err != nil {
		t.Fatal(err)
	}
	h.api.err = errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	calls := h.api.calls
	if err := h.p.Check(cmdArgs(c, podArgsUID)); err != nil || h.api.calls != calls {
		t.Errorf("CHECK of a plain pod with the API away: %v, %d lookups; want success and none", err, h.api.calls-calls)
	}

	h = newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(c, podArgsUID)); err != nil {
		t.Fatal(err)
	}
	h.api.err = errors.New("the API is away")
	if err := h.p.Check(cmdArgs(c, podArgsUID)); err != nil {
		t.Errorf("CHECK of a meshed pod against its record: %v", err)
	}
	h.net.checkDiffs = []string{"nat ISTIO_OUTPUT: missing rule 3"}
	wantCode(t, h.p.Check(cmdArgs(c, podArgsUID)), ErrRulesMismatch)

	uid := "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	newer := `{"version":99,"podUID":"` + uid + `","pod":"team-a/web-1","container":"c1","spec":"of tomorrow"}`
	if err := os.WriteFile(filepath.Join(dir, uid, "c1.json"), []byte(newer), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Check(cmdArgs(c, podArgsUID)); err != nil || !strings.Contains(h.stderr.String(), "not checked: a newer istio-cni") {
		t.Errorf("CHECK of a sandbox a newer build recorded: %v\n%s", err, h.stderr)
	}
}

// splitAlternatives puts a node's iptables programs first in PATH as
// Debian and Ubuntu can leave them: iptables (its alternative) leading to
// nf_tables, ip6tables to legacy. Nothing runs them.
func splitAlternatives(t *testing.T) {
	t.Helper()
	bin := t.TempDir()
	for target, links := range map[string][]string{
		"xtables-nft-multi":    {"iptables-restore", "iptables-save"},
		"xtables-legacy-multi": {"ip6tables-restore", "ip6tables-save"},
	} {
		if err := os.WriteFile(filepath.Join(bin, target), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if err := os.Symlink(target, filepath.Join(bin, l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", bin)
}

// savesRun records the programs a Programmer runs, printing nothing.
type savesRun struct{ names []string }

func (r *savesRun) Run(_ context.Context, _ []byte, name string, _ ...string) ([]byte, error) {
	r.names = append(r.names, name)
	return nil, nil
}

// TestRecordNamesEachFamilysBackend: on a node whose iptables and
// ip6tables alternatives differ, ADD writes each family where the node's
// own program for it leads, and its record says so: the audit and inspect,
// which read and repair a sandbox as its record says, read IPv6 from
// legacy there, not from IPv4's nf_tables (where a repair would add a
// second copy, or the audit's delete action delete the pod again and
// again). A dual-stack pod's record says version 3, which older builds
// leave alone; an IPv4-only pod's is as before.
func TestRecordNamesEachFamilysBackend(t *testing.T) {
	splitAlternatives(t)
	for _, tc := range []struct {
		prev    string
		version int
		reads   []string
	}{
		{prevDual, 3, []string{"iptables-nft-save", "ip6tables-legacy-save"}},
		{prevV4, 1, []string{"iptables-nft-save"}},
	} {
		h := newHarness()
		dir := t.TempDir()
		h.api.pods["team-a/web-1"] = meshedPod(nil)
		c := strings.TrimSuffix(conf("1.0.0", tc.prev), "}") + `,"records_dir":"` + dir + `"}`
		if err := h.p.Add(cmdArgs(c, podArgsUID)); err != nil {
			t.Fatal(err)
		}
		recs, err := (applied.Store{Dir: dir}).ForPod("0d5e2f4c-aaaa-bbbb-cccc-444455556666")
		if err != nil || len(recs) != 1 {
			t.Fatalf("records %+v, %v", recs, err)
		}
		if recs[0].Version != tc.version {
			t.Errorf("the record says version %d; want %d", recs[0].Version, tc.version)
		}
		m, _ := recs[0].Model()
		// The audit's guess for the node is nf_tables (its host's IPv4
		// rules); the record overrides it.
		run := &savesRun{}
		prog := podnet.For(recs[0].Writer(applied.Writer{Backend: release.NFT}), xtables.Programmer{Runner: run}).Programmer
		for _, rs := range m.Rulesets() {
			if _, err := prog.Read(context.Background(), rs.Family); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(run.names, tc.reads) {
			t.Errorf("%s: the sandbox's rules are read with %v; want %v", tc.prev, run.names, tc.reads)
		}
	}
}

// TestRepeatedAddRemovesTheEarlierCopy: an ADD of a sandbox an earlier ADD
// programmed in one iptables backend, the node's now leading to the
// other, writes there, records it, and then asks for the earlier copy of
// the families it wrote to be removed where they are whole elsewhere
// (podnet.Network.RemoveCopy); a failed removal is a warning. Native
// tables, a record naming no backend and a newer build's are not acted
// on. One that passes the pod through keeps the earlier rules and their
// record, as does one whose record does not read.
func TestRepeatedAddRemovesTheEarlierCopy(t *testing.T) {
	const uid = "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	model := func(v4, v6 bool) iptables.Model { return iptables.Build(iptables.DefaultSpec(), v4, v6) }
	legacy := applied.Writer{Backend: release.Legacy}
	for name, tc := range map[string]struct {
		entry     string // its keys before records_dir
		earlier   applied.Record
		raw       string // the record file as written, instead of earlier
		passNow   bool
		split     bool // the node's iptables leads to legacy, its ip6tables to nft (entry: auto)
		hasIPv6   bool // the pod's namespace
		removeErr error
		removed   *removal                  // the RemoveCopy expected, after the write
		removedBy applied.Writer            // its writer
		record    func(applied.Record) bool // the sandbox's record afterwards
	}{
		"recorded in legacy, nft now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, Backend: release.Legacy},
			removed: &removal{model(true, false), 1}, removedBy: legacy, record: programmedIn(release.NFT)},
		"recorded dual-stack in legacy, nft now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, IPv6: true, Backend: release.Legacy}, hasIPv6: true,
			removed: &removal{model(true, true), 1}, removedBy: legacy, record: programmedIn(release.NFT)},
		"recorded dual-stack in legacy, nft now, an IPv4 prevResult now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, IPv6: true, Backend: release.Legacy},
			removed: &removal{model(true, true), 1}, removedBy: legacy, record: func(r applied.Record) bool { return programmedIn(release.NFT)(r) && r.IPv6 }},
		"recorded in legacy, the node split since, IPv4 only": {split: true, earlier: applied.Record{IPv4: true, Backend: release.Legacy},
			record: programmedIn(release.Legacy)},
		"recorded dual-stack in legacy, the node split since": {split: true, earlier: applied.Record{IPv4: true, IPv6: true, Backend: release.Legacy}, hasIPv6: true,
			removed: &removal{iptables.Model{V6: model(true, true).V6, Spec: iptables.DefaultSpec()}, 1}, removedBy: legacy,
			record: func(r applied.Record) bool { return r.Backend == release.Legacy && r.BackendIPv6 == release.NFT }},
		"recorded in nft, nft now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, Backend: release.NFT},
			record: programmedIn(release.NFT)},
		"recorded native, iptables now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, Native: true},
			record: programmedIn(release.NFT)},
		"recorded in legacy, native now": {entry: `"native_nftables":true,`, earlier: applied.Record{IPv4: true, Backend: release.Legacy},
			record: func(r applied.Record) bool { return r.Native }},
		"recorded with no backend": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true},
			record: programmedIn(release.NFT)},
		"recorded passed through": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{Passed: true},
			record: programmedIn(release.NFT)},
		"the removal fails": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, Backend: release.Legacy},
			removeErr: errors.New("iptables-legacy-save: not found"), removed: &removal{model(true, false), 1}, removedBy: legacy, record: programmedIn(release.NFT)},
		"recorded in legacy, passed through now": {entry: `"iptables_backend":"nft",`, earlier: applied.Record{IPv4: true, Backend: release.Legacy}, passNow: true,
			record: programmedIn(release.Legacy)},
		"recorded by a newer build, passed through now": {entry: `"iptables_backend":"nft",`, passNow: true,
			raw:    `{"version":99,"podUID":"` + uid + `","pod":"team-a/web-1","container":"c1","spec":"of tomorrow"}`,
			record: func(r applied.Record) bool { return r.Version == 99 }},
		"a record that does not read, passed through now": {entry: `"iptables_backend":"nft",`, passNow: true, raw: `{"version":1,"podUID":`},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness()
			h.api.pods["team-a/web-1"] = meshedPod(nil)
			if tc.passNow {
				h.api.pods["team-a/web-1"] = meshedPod(map[string]string{"sidecar.istio.io/inject": "false"})
			}
			h.net.removeErr, h.net.hasIPv6 = tc.removeErr, tc.hasIPv6
			if tc.split {
				splitNode(t)
			}
			var writers []applied.Writer
			h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork { writers = append(writers, w); return h.net }
			dir := t.TempDir()
			a := cmdArgs(strings.Replace(confWithRecords(dir), `"records_dir"`, tc.entry+`"records_dir"`, 1), podArgsUID)
			a.Netns = t.TempDir()
			r := tc.earlier
			r.PodUID, r.Pod, r.Container, r.NetnsInode = uid, "team-a/web-1", a.ContainerID, netnsInode(a.Netns)
			if !r.Passed {
				r.Spec = iptables.DefaultSpec()
			}
			if err := (applied.Store{Dir: dir}).Write(r); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, uid, a.ContainerID+".json")
			if tc.raw != "" {
				if err := os.WriteFile(file, []byte(tc.raw), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.p.Add(a); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if wrote := len(h.net.writes) == 1; wrote == tc.passNow {
				t.Errorf("%d writes, want one unless passed through", len(h.net.writes))
			}
			switch {
			case tc.removed == nil && len(h.net.removed) > 0:
				t.Errorf("removed %+v, want nothing", h.net.removed)
			case tc.removed != nil && (len(h.net.removed) != 1 || !reflect.DeepEqual(h.net.removed[0], *tc.removed)):
				t.Errorf("removed %+v, want %+v", h.net.removed, *tc.removed)
			case tc.removed != nil && writers[len(writers)-1] != tc.removedBy:
				t.Errorf("removed by %+v, want %+v", writers[len(writers)-1], tc.removedBy)
			}
			warned := strings.Contains(h.stderr.String(), "earlier ADD of this sandbox")
			if want := tc.removeErr != nil || tc.passNow; warned != want {
				t.Errorf("warned %v, want %v: %s", warned, want, h.stderr)
			}
			if tc.passNow && tc.record != nil && !strings.Contains(h.stderr.String(), `"redirect":true`) {
				t.Errorf("the log line does not say the sandbox stays redirected: %s", h.stderr)
			}
			if tc.record == nil {
				if b, err := os.ReadFile(file); err != nil || string(b) != tc.raw { // #nosec G304 -- the test's own file
					t.Errorf("the record that did not read is now %q, %v", b, err)
				}
				return
			}
			recs, err := applied.Store{Dir: dir}.ForPod(uid)
			if err != nil || len(recs) != 1 || !tc.record(recs[0]) {
				t.Errorf("records %+v, %v: not the one expected", recs, err)
			}
		})
	}
}

// splitNode makes this process's iptables programs lead to legacy and its
// ip6tables programs to nft, as Debian's two alternatives can: programs
// found by name, never run.
func splitNode(t *testing.T) {
	t.Helper()
	bin := t.TempDir()
	for prefix, multi := range map[string]string{"iptables": "xtables-legacy-multi", "ip6tables": "xtables-nft-multi"} {
		target := filepath.Join(bin, multi)
		if err := os.WriteFile(target, nil, 0o755); err != nil { // #nosec G306 -- found by name, never run
			t.Fatal(err)
		}
		for _, tool := range []string{"-restore", "-save"} {
			if err := os.Symlink(target, filepath.Join(bin, prefix+tool)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
}

// programmedIn: the sandbox's record says ADD programmed it in iptables b.
func programmedIn(b release.Backend) func(applied.Record) bool {
	return func(r applied.Record) bool { return !r.Passed && !r.Native && r.Backend == b }
}

// TestRepeatedAddWritesTheRecordedSpec: a repeated ADD of a redirected
// sandbox (a runtime's retry, Multus adding a network) writes the spec its
// first ADD recorded, as the audit repairs to, not one planned from
// annotations or node settings edited since, nor fails on an edit that
// does not parse; its families are the recorded ones and any it finds
// now, so IPv6 added since is redirected and IPv6 redirected stays so.
func TestRepeatedAddWritesTheRecordedSpec(t *testing.T) {
	const uid = "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	edited := map[string]string{decision.ExcludeOutboundPorts: "5432", decision.ExcludeInboundPorts: "8080"}
	for name, tc := range map[string]struct {
		prev, prevNow string            // the primary's result at each ADD
		now           map[string]string // the pod's annotations at the second ADD
		entryNow      string            // keys added to the entry at the second ADD
		raw           bool              // the first record rewritten as a newer build's
		lookupErr     error             // the API's answer at the second ADD
		wantErr       bool
		v6Now         bool // IPv6 in the namespace at the second ADD
		wantV6        bool
		wantEdited    bool // the second ADD writes the edited annotations' spec
		warning       string
	}{
		"annotations unchanged":                                  {prev: prevV4, prevNow: prevV4},
		"annotations edited":                                     {prev: prevV4, prevNow: prevV4, now: edited, warning: "OutboundExclude"},
		"annotations edited, IPv6 added":                         {now: edited, v6Now: true, wantV6: true, warning: "OutboundExclude"},
		"recorded dual-stack, no IPv6 found now":                 {prev: prevDual, prevNow: prevV4, wantV6: true},
		"the pod lookup fails":                                   {prev: prevV4, prevNow: prevV4, lookupErr: errors.New("connection refused"), warning: "recorded rules are written"},
		"the node's TPROXY mark changed":                         {prev: prevV4, prevNow: prevV4, entryNow: `"tproxy_mark":1340,`, warning: "TProxyMark"},
		"an edit that does not parse":                            {prev: prevV4, prevNow: prevV4, now: map[string]string{decision.ExcludeOutboundPorts: "abc"}, warning: "recorded rules are written"},
		"recorded by a newer build, annotations edited":          {prev: prevV4, prevNow: prevV4, now: edited, raw: true, wantEdited: true},
		"recorded by a newer build, an edit that does not parse": {prev: prevV4, prevNow: prevV4, now: map[string]string{decision.ExcludeOutboundPorts: "abc"}, raw: true, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness()
			h.api.pods["team-a/web-1"] = meshedPod(nil)
			dir := t.TempDir()
			entry := func(prev, keys string) string {
				return strings.TrimSuffix(conf("1.0.0", prev), "}") + `,` + keys + `"records_dir":"` + dir + `"}`
			}
			a := cmdArgs(entry(tc.prev, ""), podArgsUID)
			a.Netns = t.TempDir()
			if err := h.p.Add(a); err != nil {
				t.Fatalf("first ADD: %v", err)
			}
			first := h.net.programmed[a.Netns]
			if tc.raw {
				file := filepath.Join(dir, uid, a.ContainerID+".json")
				raw := `{"version":99,"podUID":"` + uid + `","pod":"team-a/web-1","container":"` + a.ContainerID + `","spec":"of tomorrow"}`
				if err := os.WriteFile(file, []byte(raw), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			h.api.pods["team-a/web-1"] = meshedPod(tc.now)
			h.net.hasIPv6, h.api.err = tc.v6Now, tc.lookupErr
			h.stderr.Reset()
			a.StdinData = []byte(entry(tc.prevNow, tc.entryNow))
			err := h.p.Add(a)
			switch {
			case tc.wantErr && err == nil:
				t.Fatal("repeated ADD passed, want the plan's error: a newer build's record is not read for its spec")
			case tc.wantErr:
				return
			case err != nil:
				t.Fatalf("repeated ADD: %v", err)
			}
			second := h.net.programmed[a.Netns]
			if (second.V6 != nil) != tc.wantV6 {
				t.Errorf("IPv6 rules %v, want %v", second.V6 != nil, tc.wantV6)
			}
			excluded := slices.Contains(second.Spec.OutboundExclude, 5432)
			if same := applied.SameSpec(first.Spec, second.Spec); same == tc.wantEdited || excluded != tc.wantEdited {
				t.Errorf("the repeated ADD wrote %s, want the edited spec: %v", applied.SpecDiff(first.Spec, second.Spec), tc.wantEdited)
			}
			if want := iptables.Build(second.Spec, true, tc.wantV6); !reflect.DeepEqual(second, want) {
				t.Errorf("wrote a model that is not its spec's")
			}
			recs, err := applied.Store{Dir: dir}.ForPod(uid)
			if err != nil || len(recs) != 1 || !applied.SameSpec(recs[0].Spec, second.Spec) || recs[0].IPv6 != tc.wantV6 {
				t.Errorf("records %+v, %v: not what the repeated ADD wrote", recs, err)
			}
			warned := strings.Contains(h.stderr.String(), `"warnings":`)
			if want := tc.warning != ""; warned != want || !strings.Contains(h.stderr.String(), tc.warning) {
				t.Errorf("warned %v, want %q: %s", warned, tc.warning, h.stderr)
			}
		})
	}
}
