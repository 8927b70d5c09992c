package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// recordADD writes the record ADD would have left for p's sandbox.
func (h *harness) recordADD(t *testing.T, p *corev1.Pod) applied.Record {
	t.Helper()
	r := applied.Record{PodUID: string(p.UID), Pod: podName(p), Container: "sandbox-" + p.Name,
		NetnsInode: h.ns[string(p.UID)].Inode, IPv4: true,
		Spec: decision.FinalSpec(mustDecide(t, p), decision.DefaultNodeSettings())}
	if err := h.records.Write(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRepairRestoresWhatADDApplied: someone allowed to patch pods widens a
// running pod's exclusions; its rules are then flushed. The repair restores
// the rules ADD applied, not the weakened ones, and the change is reported
// once.
func TestRepairRestoresWhatADDApplied(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("edited")
	h.add(p, false)
	rec := h.recordADD(t, p)
	p.Annotations["traffic.sidecar.istio.io/excludeOutboundIPRanges"] = "0.0.0.0/0"
	ctx := context.Background()
	h.a.pass(ctx, nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(ctx, nil)
	if want, _ := rec.Model(); len(h.net.programmed) != 1 || !reflect.DeepEqual(h.net.programmed[0], want) {
		t.Fatalf("programmed %d models; want exactly the recorded one", len(h.net.programmed))
	}
	evs := h.drainEvents()
	var changed []string
	for _, e := range evs {
		if strings.Contains(e, ReasonSettingsChanged) {
			changed = append(changed, e)
		}
	}
	if len(changed) != 1 || !strings.Contains(changed[0], "restart the pod to apply") || !strings.Contains(changed[0], "OutboundIPExclude") {
		t.Errorf("events %q: want one %s naming the field", evs, ReasonSettingsChanged)
	}
	// Said once, not every pass.
	h.clock.advance(time.Minute)
	h.a.pass(ctx, nil)
	for _, e := range h.drainEvents() {
		if strings.Contains(e, ReasonSettingsChanged) {
			t.Errorf("reported again: %s", e)
		}
	}
}

// TestOlderBuildsStatusPortIsNoChange: builds before this one excluded
// the status port outbound whatever excludeOutboundPorts said, and their
// records say so. A pod they started, annotated as the injector annotates
// every pod of a mesh that sets global.proxy.excludeOutboundPorts, has not
// had its settings changed, and no Event says so; a real edit still does.
func TestOlderBuildsStatusPortIsNoChange(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("older")
	p.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"] = "5432"
	h.add(p, true)
	r := h.recordADD(t, p)
	r.Spec.OutboundExclude = []uint16{5432, 15020} // as those builds recorded it
	if err := h.records.Write(r); err != nil {
		t.Fatal(err)
	}
	h.passesPastConfirm()
	if evs := h.drainEvents(); len(evs) != 0 {
		t.Errorf("events %q: want none", evs)
	}
	p.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"] = "5432,9092"
	h.passesPastConfirm()
	if evs := h.drainEvents(); len(evs) != 1 || !strings.Contains(evs[0], ReasonSettingsChanged) || !strings.Contains(evs[0], "OutboundExclude") {
		t.Errorf("events %q: want one %s naming the field", evs, ReasonSettingsChanged)
	}
}

// TestEarlierBuildsRulesWithoutARecord: records go with an uninstall, so
// a pod an earlier build started, annotated as the injector annotates
// every pod of a mesh that sets global.proxy.excludeOutboundPorts, holds
// that build's rules (the status port excluded outbound too) and no
// record: they are the pod's, and nothing is done; rules that are neither
// this build's nor that one's are still repaired, to this build's.
func TestEarlierBuildsRulesWithoutARecord(t *testing.T) {
	p := meshed("unrecorded")
	p.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"] = "5432"
	d := mustDecide(t, p)
	now := decision.Rules(d, decision.DefaultNodeSettings(), true, false)
	earlier, differs := decision.EarlierRules(d, decision.DefaultNodeSettings(), true, false)
	if !differs {
		t.Fatal("no earlier rules for excludeOutboundPorts=5432")
	}
	neither := iptables.Build(iptables.DefaultSpec(), true, false)
	for _, tc := range []struct {
		name   string
		holds  iptables.Model
		record bool // this build's record of the sandbox
		errFor *iptables.Model
		repair bool
	}{
		{name: "this build's", holds: now},
		{name: "an earlier build's", holds: earlier},
		{name: "neither", holds: neither, repair: true},
		// A record says what the sandbox holds: nothing else passes.
		{name: "an earlier build's, this build's record", holds: earlier, record: true, repair: true},
		// A second read that fails is no pass: the pod is not checked.
		{name: "neither, the second read failing", holds: neither, errFor: &earlier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Delete)
			h.add(p, true)
			if tc.record {
				h.recordADD(t, p)
			}
			h.net.holds = map[uint64]iptables.Model{h.ns[string(p.UID)].Inode: tc.holds}
			h.net.errFor = tc.errFor
			h.passesPastConfirm()
			evs := h.drainEvents()
			if found := len(evs) > 0; found != tc.repair {
				t.Errorf("events %q, want some: %v", evs, tc.repair)
			}
			if unread := testutil.ToFloat64(h.metrics.Errors) > 0; unread != (tc.errFor != nil) {
				t.Errorf("read errors %v, want some: %v", testutil.ToFloat64(h.metrics.Errors), tc.errFor != nil)
			}
		})
	}
}

// TestRecordedPodNoLongerMeshedIsKept: annotations that now say "not
// meshed" (inject=false, added after start) do not take the pod out of
// the audit: it was redirected at ADD and stays so.
func TestRecordedPodNoLongerMeshedIsKept(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("opted-out-later")
	h.add(p, false)
	h.recordADD(t, p)
	p.Labels = map[string]string{decision.InjectLabel: "false"}
	h.a.pass(context.Background(), nil)
	h.clock.advance(3 * time.Second)
	if n := h.a.pass(context.Background(), nil); n != 1 || len(h.net.programmed) != 1 {
		t.Errorf("checked %d, programmed %d: want the recorded pod checked and repaired", n, len(h.net.programmed))
	}
}

// TestRecordOfAnotherSandboxIsNotUsed: a record for an older sandbox of the
// pod does not apply to the current one; its annotations do.
func TestRecordOfAnotherSandboxIsNotUsed(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("resandboxed")
	h.add(p, false)
	old := h.recordADD(t, p)
	old.Container, old.NetnsInode = "older", 1
	old.Spec.OutboundPort = 16001
	if err := h.records.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := h.records.Remove(old.PodUID, "sandbox-"+p.Name); err != nil {
		t.Fatal(err)
	}
	h.a.pass(context.Background(), nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(context.Background(), nil)
	want := decision.Rules(mustDecide(t, p), decision.DefaultNodeSettings(), true, false)
	if len(h.net.programmed) != 1 || !reflect.DeepEqual(h.net.programmed[0], want) {
		t.Errorf("programmed %d: want the annotations' model", len(h.net.programmed))
	}
}

// TestRecordsOfGonePodsArePruned: a full pass removes the records of pods
// no longer on the node.
func TestRecordsOfGonePodsArePruned(t *testing.T) {
	h := newHarness(t, Repair)
	stay, leave := meshed("stay"), meshed("leave")
	h.add(stay, true)
	h.add(leave, true)
	h.recordADD(t, stay)
	h.recordADD(t, leave)
	h.pods.pods = h.pods.pods[:1]
	h.a.fullPass(context.Background())
	if r, _ := h.records.ForPod(string(stay.UID)); len(r) != 1 {
		t.Errorf("the running pod's record: %d", len(r))
	}
	if r, _ := h.records.ForPod(string(leave.UID)); len(r) != 0 {
		t.Errorf("the gone pod's record kept: %d", len(r))
	}
	if testutil.ToFloat64(h.metrics.Unredirected) != 0 {
		t.Error("gauge")
	}
}

// A meshed pod whose reported address was given to a plain pod: the
// namespace that address leads to is the plain pod's, as ADD recorded it.
// The audit neither reads nor programs it (a repair there would refuse the
// plain pod's traffic), and says why, once.
func TestNeverProgramsANamespaceRecordedForAnotherPod(t *testing.T) {
	h := newHarness(t, Repair)
	stale := meshed("stale")
	h.add(stale, false)
	plain := meshed("plain")
	plain.Annotations = nil
	h.pods.pods = append(h.pods.pods, plain)
	if err := h.records.Write(applied.Record{PodUID: string(plain.UID), Pod: podName(plain), Container: "sandbox-plain",
		NetnsInode: h.ns[string(stale.UID)].Inode, Passed: true}); err != nil {
		t.Fatal(err)
	}
	h.passesPastConfirm()
	if len(h.net.programmed) != 0 {
		t.Errorf("programmed the plain pod's namespace for the meshed pod")
	}
	notChecked := h.eventsOf(ReasonNotChecked)
	if len(notChecked) != 1 || !strings.Contains(notChecked[0], "recorded its network namespace for pod default/plain") {
		t.Errorf("events %q: want one %s naming the plain pod", notChecked, ReasonNotChecked)
	}
	if u := testutil.ToFloat64(h.metrics.Unchecked); u != 1 {
		t.Errorf("unchecked %v, want 1", u)
	}
}

// ownersFail is a record store whose Owners cannot read it.
type ownersFail struct{ applied.Store }

func (ownersFail) Owners(uint64) ([]applied.Record, error) {
	return nil, errors.New("records: permission denied")
}

// forPodFails is a record store whose ForPod cannot read it.
type forPodFails struct{ applied.Store }

func (forPodFails) ForPod(string) ([]applied.Record, error) {
	return nil, errors.New("records: too many open files")
}

// When the records cannot say what ADD applied to a pod's namespace, or
// whose it is, the audit does not program it: a repair would follow the
// annotations as they are now (weakened since ADD, or naming a pod ADD
// passed through), or the namespace may be another pod's. The pod is
// counted unchecked, and the Event says why.
func TestUnreadableRecordsNoRepair(t *testing.T) {
	for name, c := range map[string]struct {
		records func(applied.Store) Records
		edit    func(p *corev1.Pod)
		why     string
	}{
		"Owners fails, the pod without a record of its own": {
			records: func(s applied.Store) Records { return ownersFail{s} },
			why:     "the node's records of sandboxes cannot be read (records: permission denied)",
		},
		"ForPod fails, the pod's exclusions widened since ADD": {
			records: func(s applied.Store) Records { return forPodFails{s} },
			edit: func(p *corev1.Pod) {
				p.Annotations["traffic.sidecar.istio.io/excludeOutboundIPRanges"] = "0.0.0.0/0"
			},
			why: "the pod's records of sandboxes cannot be read (records: too many open files)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Repair)
			p := meshed("web")
			h.add(p, false)
			if c.edit != nil {
				h.recordADD(t, p)
				c.edit(p)
			}
			h.a.deps.Records = c.records(h.records)
			h.passesPastConfirm()
			if len(h.net.programmed) != 0 {
				t.Errorf("programmed a namespace whose records could not be read")
			}
			if u := testutil.ToFloat64(h.metrics.Unchecked); u != 1 {
				t.Errorf("unchecked %v, want 1", u)
			}
			notChecked := h.eventsOf(ReasonNotChecked)
			if len(notChecked) != 1 || !strings.Contains(notChecked[0], c.why) {
				t.Errorf("events %q: want one %s saying %q", notChecked, ReasonNotChecked, c.why)
			}
		})
	}
}

// Two pods claiming one address (the meshed pod's status is stale): no
// namespace is proven the meshed pod's, so it is not checked, and the
// Event says which pod claims its address.
func TestAddressClaimedByTwoPodsIsNotChecked(t *testing.T) {
	h := newHarness(t, Repair)
	stale := meshed("stale")
	h.add(stale, false)
	plain := meshed("plain")
	plain.Annotations = nil
	plain.Status.PodIPs = stale.Status.PodIPs
	h.pods.pods = append(h.pods.pods, plain)
	h.passesPastConfirm()
	if len(h.net.programmed) != 0 {
		t.Error("programmed a namespace that cannot be proven the pod's")
	}
	evs := h.drainEvents()
	if len(evs) != 1 || !strings.Contains(evs[0], ReasonNotChecked) || !strings.Contains(evs[0], "also claimed by pod default/plain") {
		t.Errorf("events %q: want one %s naming the other claimant", evs, ReasonNotChecked)
	}
}

// A sandbox ADD passed through (the pod was not meshed when it started)
// is held to that, as Istio applies a pod's settings only at its start:
// the audit programs nothing in it, even if the pod's annotations say
// meshed now. But not silently: one Warning Event says the pod runs
// unredirected until restarted.
func TestPassedSandboxIsHeldToNothingOutLoud(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("late")
	h.add(p, false)
	if err := h.records.Write(applied.Record{PodUID: string(p.UID), Pod: podName(p), Container: "sandbox-late",
		NetnsInode: h.ns[string(p.UID)].Inode, Passed: true}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.a.fullPass(context.Background())
		h.clock.advance(3 * time.Second)
	}
	if len(h.net.programmed) != 0 {
		t.Errorf("programmed %d models for a sandbox ADD passed through", len(h.net.programmed))
	}
	if evs := h.drainEvents(); len(evs) != 1 || !strings.Contains(evs[0], ReasonSettingsChanged) || !strings.Contains(evs[0], "meshed now") {
		t.Errorf("events %q: want one %s saying the pod is meshed now", evs, ReasonSettingsChanged)
	}
}

// TestNewerRecordIsLeftAlone: an agent rolled back to an older build meets
// a record a newer build wrote. It cannot know what that build applied (a
// field it does not know may be the rule it would strip), so it neither
// reads nor repairs the sandbox, emits no Event, and counts the pod
// unchecked; the log says why, once.
func TestNewerRecordIsLeftAlone(t *testing.T) {
	for _, action := range []Action{Repair, Delete, Label} {
		t.Run(string(action), func(t *testing.T) {
			h := newHarness(t, action)
			var logged strings.Builder
			h.a.deps.Log = slog.New(slog.NewTextHandler(&logged, nil))
			p := meshed("from-the-future")
			h.add(p, false) // what this build would call unredirected
			newer := fmt.Sprintf(`{"version":%d,"podUID":%q,"pod":"default/from-the-future","container":"sandbox-1","netnsInode":%d,`+
				`"spec":{"someFieldOfTomorrow":true},"ipv4":true,"at":"2026-12-01T00:00:00Z"}`, applied.Version+1, p.UID, h.ns[string(p.UID)].Inode)
			writeRecordFile(t, h.records.Dir, string(p.UID), "sandbox-1", newer)
			h.passesPastConfirm()
			if len(h.net.programmed) != 0 || h.net.checked != 0 || len(h.actions.deleted) != 0 || len(h.actions.labelled) != 0 {
				t.Errorf("programmed %d, checked %d, deleted %v, labelled %v: want the pod left alone",
					len(h.net.programmed), h.net.checked, h.actions.deleted, h.actions.labelled)
			}
			if evs := h.drainEvents(); len(evs) != 0 {
				t.Errorf("events %q: want none", evs)
			}
			if u := testutil.ToFloat64(h.metrics.Unchecked); u != 1 {
				t.Errorf("unchecked = %v, want 1", u)
			}
			if n := strings.Count(logged.String(), "newer"); n != 1 {
				t.Errorf("log said it %d times, want once:\n%s", n, logged.String())
			}
		})
	}
}

func writeRecordFile(t *testing.T, dir, uid, container, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, uid), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, uid, container+".json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNewerPassedRecordOfAPlainPodIsNoCandidate: after a rollback, a plain
// pod whose sandbox a newer build passed through is not a pod the audit
// leaves unchecked: no build programmed it, so it is not counted or logged.
func TestNewerPassedRecordOfAPlainPodIsNoCandidate(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("plain-from-the-future")
	p.Annotations = nil
	p.Spec.Containers = p.Spec.Containers[:1]
	h.add(p, false)
	writeRecordFile(t, h.records.Dir, string(p.UID), "sandbox-1", fmt.Sprintf(
		`{"version":%d,"podUID":%q,"container":"sandbox-1","netnsInode":%d,"passed":true}`, applied.Version+1, p.UID, h.ns[string(p.UID)].Inode))
	h.passesPastConfirm()
	if u := testutil.ToFloat64(h.metrics.Unchecked); u != 0 || h.net.checked != 0 {
		t.Errorf("unchecked = %v, namespaces read %d: want a plain pod left out of the audit", u, h.net.checked)
	}
}

// TestRecordSaysHowToReadTheRules: the audit reads and repairs a sandbox
// as its ADD wrote it, whatever the node's plugin writes now: a native
// record as nftables, an iptables record with its backend, and one that
// names none with the node's detected iptables backend even on a node
// now native (the image has no plain iptables-save to resolve), a guess
// (read where the rules are found).
func TestRecordSaysHowToReadTheRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    applied.Writer
		native  bool
		backend release.Backend
		want    applied.Writer
	}{
		{"native record, iptables node", applied.Writer{Backend: release.NFT}, true, "", applied.Writer{Native: true}},
		{"legacy record, native node", applied.Writer{Native: true, Backend: release.NFT}, false, release.Legacy, applied.Writer{Backend: release.Legacy}},
		{"record naming no backend, native node", applied.Writer{Native: true, Backend: release.Legacy}, false, "", applied.Writer{Backend: release.Legacy, Guessed: true}},
		{"record naming no backend, iptables node", applied.Writer{Backend: release.NFT}, false, "", applied.Writer{Backend: release.NFT, Guessed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Repair)
			h.a.cfg.Writer = tc.node
			var asked []applied.Writer
			h.a.deps.Network = func(w applied.Writer) Network { asked = append(asked, w); return h.net }
			p := meshed("recorded")
			h.add(p, false)
			r := applied.Record{PodUID: string(p.UID), Pod: podName(p), Container: "sandbox-" + p.Name,
				NetnsInode: h.ns[string(p.UID)].Inode, IPv4: true, Native: tc.native, Backend: tc.backend,
				Spec: decision.FinalSpec(mustDecide(t, p), decision.DefaultNodeSettings())}
			if err := h.records.Write(r); err != nil {
				t.Fatal(err)
			}
			h.a.pass(context.Background(), nil)
			if len(asked) == 0 || asked[len(asked)-1] != tc.want {
				t.Errorf("the audit read the sandbox as %+v, want %+v", asked, tc.want)
			}
		})
	}
}

// TestRepairClearsTheOtherKindWithoutARecordOnly: a record names the
// writer of a sandbox's rules, and its repair touches no other; a sandbox
// with none is read in both kinds, and its repair clears the other's.
func TestRepairClearsTheOtherKindWithoutARecordOnly(t *testing.T) {
	h := newHarness(t, Repair)
	recorded, unrecorded := meshed("recorded"), meshed("unrecorded")
	h.add(recorded, false)
	h.add(unrecorded, false)
	h.recordADD(t, recorded)
	h.passesPastConfirm()
	if got := testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")); got != 2 {
		t.Fatalf("%v repairs, want 2; events %q", got, h.drainEvents())
	}
	if h.net.cleared != 1 {
		t.Errorf("the other kind's rules cleared %d times, want once (the unrecorded sandbox's repair)", h.net.cleared)
	}
}

// TestOtherKindReadFirstOnceFound: a sandbox with no record found whole
// as the other kind of writer writes it is read that way first on later
// passes, without the node's writer's read of a sandbox it holds nothing
// of (iptables-save in both backends on an iptables node). A read there
// that fails is no finding for Confirm; failing longer, the pod is read as
// one whose kind is not known, where a failed read holds nothing: rules
// gone meanwhile cannot hide behind the failure, and the finding says it.
func TestOtherKindReadFirstOnceFound(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("switched")
	h.add(p, false)
	native := &fakeNetwork{redirected: map[uint64]bool{h.ns[string(p.UID)].Inode: true}}
	h.a.deps.Network = func(w applied.Writer) Network {
		if w.Native {
			return native
		}
		return h.net
	}
	h.passesPastConfirm()
	if h.net.checked == 0 || native.checked == 0 {
		t.Fatalf("the node's writer read %d times, the other kind %d", h.net.checked, native.checked)
	}
	first, firstNative := h.net.checked, native.checked
	h.passesPastConfirm()
	if events := h.drainEvents(); h.net.checked != first || native.checked == firstNative || len(events) != 0 || len(h.net.programmed) != 0 {
		t.Errorf("later passes read with the node's writer %d times, want none, and natively %d, want some; events %q, repairs %v",
			h.net.checked-first, native.checked-firstNative, events, h.net.programmed)
	}
	// The native read keeps failing.
	native.mu.Lock()
	native.readErr = errors.New("netlink receive: interrupted system call")
	native.mu.Unlock()
	unread := testutil.ToFloat64(h.metrics.Errors)
	for range 2 { // Confirm apart: a pod without its rules would be found
		h.a.fullPass(context.Background())
		h.clock.advance(3 * time.Second)
	}
	if events := h.drainEvents(); len(events) != 0 || len(h.net.programmed) != 0 || native.cleared != 0 {
		t.Errorf("the native read failing for Confirm: events %q, repairs %v, native rules cleared %d times; want none", events, h.net.programmed, native.cleared)
	}
	if got := testutil.ToFloat64(h.metrics.Errors) - unread; got != 1 {
		t.Errorf("%v failed checks counted, want 1 (the second pass reads the pod as of unknown kind)", got)
	}
	h.passesPastConfirm()
	if events := h.drainEvents(); len(events) == 0 || !strings.Contains(events[0], ReasonMissing) ||
		!strings.Contains(events[0], "native nftables: cannot read them: netlink receive: interrupted system call") || len(h.net.programmed) == 0 {
		t.Errorf("the native read failing past Confirm: events %q, repairs %v; want the pod found and repaired", events, h.net.programmed)
	}
}
