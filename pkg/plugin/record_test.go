package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
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

// TestRepeatedAddClearsTheEarlierRules: an ADD of a sandbox an earlier ADD
// programmed removes those rules as its record says they were written
// before it writes, or passes the pod through; a failed removal fails the
// ADD before it writes or records anything. A passed-through sandbox's
// record, and a newer build's, leave the namespace alone.
func TestRepeatedAddClearsTheEarlierRules(t *testing.T) {
	const uid = "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	for name, tc := range map[string]struct {
		earlier    applied.Record
		pod        *kube.Pod
		cleanupErr error
		cleanedBy  []applied.Writer // the writers of the Cleanups, in order
		programmed bool
		passed     bool // the record afterwards
		fails      bool
	}{
		"recorded native, iptables now": {earlier: applied.Record{IPv4: true, Native: true},
			pod: meshedPod(nil), cleanedBy: []applied.Writer{{Native: true}}, programmed: true},
		"recorded in legacy, passed through now": {earlier: applied.Record{IPv4: true, Backend: release.Legacy},
			pod: meshedPod(map[string]string{"sidecar.istio.io/inject": "false"}), cleanedBy: []applied.Writer{{Backend: release.Legacy}}, passed: true},
		"the removal fails": {earlier: applied.Record{IPv4: true, Backend: release.Legacy}, pod: meshedPod(nil),
			cleanupErr: errors.New("nf_tables refused"), cleanedBy: []applied.Writer{{Backend: release.Legacy}}, fails: true},
		"recorded passed through":   {earlier: applied.Record{Passed: true}, pod: meshedPod(nil), programmed: true},
		"recorded by a newer build": {earlier: applied.Record{IPv4: true, Version: applied.Version + 1}, pod: meshedPod(nil), programmed: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness()
			h.api.pods["team-a/web-1"] = tc.pod
			h.net.cleanupErr = tc.cleanupErr
			var writers []applied.Writer
			h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork { writers = append(writers, w); return h.net }
			dir := t.TempDir()
			a := cmdArgs(confWithRecords(dir), podArgsUID)
			a.Netns = t.TempDir()
			r := tc.earlier
			r.PodUID, r.Pod, r.Container, r.NetnsInode = uid, "team-a/web-1", a.ContainerID, netnsInode(a.Netns)
			if !r.Passed {
				r.Spec = iptables.DefaultSpec()
			}
			if err := (applied.Store{Dir: dir}).Write(r); err != nil {
				t.Fatal(err)
			}
			if r.Version > applied.Version {
				// Write writes this build's version: a newer build's
				// record is written as it would be, with fields this
				// build does not know.
				newer := fmt.Sprintf(`{"version":%d,"podUID":%q,"pod":"team-a/web-1","container":%q,"netnsInode":%d,"spec":"of tomorrow"}`, r.Version, uid, a.ContainerID, r.NetnsInode)
				if err := os.WriteFile(filepath.Join(dir, uid, a.ContainerID+".json"), []byte(newer), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := h.p.Add(a)
			if (err != nil) != tc.fails {
				t.Fatalf("ADD: %v, want failure %v", err, tc.fails)
			}
			if len(h.net.cleaned) != len(tc.cleanedBy) || !slices.Equal(writers[:len(tc.cleanedBy)], tc.cleanedBy) {
				t.Errorf("cleanups %v by %+v, want by %+v", h.net.cleaned, writers, tc.cleanedBy)
			}
			if _, ok := h.net.programmed[a.Netns]; ok != tc.programmed {
				t.Errorf("programmed %v, want %v", ok, tc.programmed)
			}
			if tc.programmed && len(h.net.writes) != 1 {
				t.Errorf("%d writes, want 1", len(h.net.writes))
			}
			recs, err := applied.Store{Dir: dir}.ForPod(uid)
			switch {
			case err != nil || len(recs) != 1:
				t.Fatalf("records %+v, %v: want one", recs, err)
			case tc.fails && (recs[0].Backend != r.Backend || recs[0].Passed):
				t.Errorf("a failed ADD changed the record: %+v", recs[0])
			case recs[0].Passed != tc.passed:
				t.Errorf("record passed %v, want %v", recs[0].Passed, tc.passed)
			}
		})
	}
}
