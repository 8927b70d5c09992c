package audit

import (
	"context"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

func TestRedirectedPodIsLeftAlone(t *testing.T) {
	h := newHarness(t, Repair)
	h.add(meshed("ok"), true)
	if n := h.a.pass(context.Background(), nil); n != 1 {
		t.Fatalf("checked %d pods, want 1", n)
	}
	if len(h.net.programmed) != 0 || len(h.drainEvents()) != 0 {
		t.Errorf("programmed %d, events: want none", len(h.net.programmed))
	}
}

func TestRepairAfterConfirmation(t *testing.T) {
	h := newHarness(t, Repair)
	h.add(meshed("bare"), false)
	ctx := context.Background()

	h.a.pass(ctx, nil)
	if len(h.net.programmed) != 0 || testutil.ToFloat64(h.metrics.Findings) != 0 {
		t.Fatal("acted before the confirmation delay: an ADD may still be running")
	}
	h.clock.advance(2 * time.Second)
	h.a.pass(ctx, nil)
	if len(h.net.programmed) != 1 {
		t.Fatalf("programmed %d times, want 1", len(h.net.programmed))
	}
	// The model is the one ADD computes for this pod.
	want := decision.Rules(mustDecide(t, meshed("bare")), decision.DefaultNodeSettings(), true, false)
	if got := h.net.programmed[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("programmed a model that differs from ADD's")
	}
	evs := h.drainEvents()
	if len(evs) != 2 || !strings.HasPrefix(evs[0], "Warning "+ReasonMissing) || !strings.HasPrefix(evs[1], "Normal "+ReasonRepaired) {
		t.Errorf("events %q, want missing then repaired", evs)
	}
	if testutil.ToFloat64(h.metrics.Findings) != 1 || testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")) != 1 {
		t.Errorf("findings %v, repairs %v: want 1 and 1", testutil.ToFloat64(h.metrics.Findings),
			testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "success")))
	}
	if up := testutil.ToFloat64(h.metrics.PodsRepaired.WithLabelValues("repair", "success")); up != 1 {
		t.Errorf("upstream's istio_cni_repair_pods_repaired_total{type=repair,result=success} %v, want 1", up)
	}
	if g := testutil.ToFloat64(h.metrics.Unredirected); g != 0 {
		t.Errorf("unredirected gauge %v after the repair, want 0", g)
	}
	// Repaired: the next pass finds it in place.
	h.clock.advance(time.Minute)
	h.a.pass(ctx, nil)
	if len(h.net.programmed) != 1 {
		t.Errorf("programmed again a pod that has its rules")
	}
}

func TestNewSandboxRestartsConfirmation(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("flip")
	h.add(p, false)
	ctx := context.Background()
	h.a.pass(ctx, nil)
	h.clock.advance(time.Second)
	// A new sandbox (new namespace) whose ADD is under way.
	h.ns[string(p.UID)] = h.netns("new-sandbox")
	h.clock.advance(time.Second)
	h.a.pass(ctx, nil)
	if len(h.net.programmed) != 0 {
		t.Fatal("acted on a namespace first seen less than Confirm ago")
	}
}

func TestFailedRepairKeepsPodCounted(t *testing.T) {
	h := newHarness(t, Repair)
	h.net.programErr = errBoom
	h.add(meshed("stuck"), false)
	ctx := context.Background()
	h.a.pass(ctx, nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(ctx, nil)
	if g := testutil.ToFloat64(h.metrics.Unredirected); g != 1 {
		t.Errorf("unredirected gauge %v, want 1", g)
	}
	if f := testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "failure")); f != 1 {
		t.Errorf("failures %v, want 1", f)
	}
	if f := testutil.ToFloat64(h.metrics.PodsRepaired.WithLabelValues("repair", "fail")); f != 1 {
		t.Errorf("upstream's result=fail %v, want 1", f)
	}
	evs := h.drainEvents()
	if len(evs) != 2 || !strings.Contains(evs[1], ReasonFailed) || !strings.Contains(evs[1], "exit status 4") {
		t.Errorf("events %q", evs)
	}
	// Retried on the next pass; found once, not twice.
	h.net.programErr = nil
	h.a.pass(ctx, nil)
	if len(h.net.programmed) != 2 || testutil.ToFloat64(h.metrics.Findings) != 1 || testutil.ToFloat64(h.metrics.Unredirected) != 0 {
		t.Errorf("programmed %d, findings %v, gauge %v", len(h.net.programmed), testutil.ToFloat64(h.metrics.Findings), testutil.ToFloat64(h.metrics.Unredirected))
	}
}

func TestDeleteAndLabelActOnce(t *testing.T) {
	for _, action := range []Action{Delete, Label} {
		t.Run(string(action), func(t *testing.T) {
			h := newHarness(t, action)
			h.add(meshed("leak"), false)
			ctx := context.Background()
			h.a.pass(ctx, nil)
			h.clock.advance(3 * time.Second)
			h.a.pass(ctx, nil)
			h.a.pass(ctx, nil)
			got := h.actions.deleted
			if action == Label {
				got = h.actions.labelled
			}
			if !slices.Equal(got, []string{"leak"}) || len(h.net.programmed) != 0 {
				t.Errorf("%s: acted on %v, programmed %d: want leak once and no programming", action, got, len(h.net.programmed))
			}
			if testutil.ToFloat64(h.metrics.Unredirected) != 1 {
				t.Errorf("the pod still runs unredirected until it is gone")
			}
		})
	}
}

func TestReportOnlyRecords(t *testing.T) {
	h := newHarness(t, Report)
	h.add(meshed("seen"), false)
	h.a.pass(context.Background(), nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(context.Background(), nil)
	if len(h.net.programmed)+len(h.actions.deleted)+len(h.actions.labelled) != 0 {
		t.Error("report acted")
	}
	if evs := h.drainEvents(); len(evs) != 1 || !strings.Contains(evs[0], ReasonMissing) {
		t.Errorf("events %q, want one %s", evs, ReasonMissing)
	}
}

func TestOnlyMeshedStartedPodsAreChecked(t *testing.T) {
	h := newHarness(t, Repair)
	plain := meshed("plain")
	plain.Annotations = nil
	system := meshed("system")
	system.Namespace = "kube-system"
	agent := meshed("agent")
	agent.Namespace = "istio-cni"
	pending := meshed("pending")
	pending.Status.Phase = corev1.PodPending
	initRunning := meshed("init-running")
	initRunning.Status.Phase = corev1.PodPending
	initRunning.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	terminating := meshed("terminating")
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	host := meshed("host")
	host.Spec.HostNetwork = true
	for _, p := range []*corev1.Pod{plain, system, agent, pending, initRunning, terminating, host} {
		h.add(p, false)
	}
	// The agent's own namespace is like any other: its started sidecar
	// pod is checked.
	if n := h.a.pass(context.Background(), nil); n != 2 {
		t.Errorf("checked %d pods, want the one whose init container runs and the one in the agent's namespace", n)
	}
}

func TestInvalidSettingsAreFoundNotRepaired(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("bad")
	p.Annotations["traffic.sidecar.istio.io/includeInboundPorts"] = "not-a-port"
	h.add(p, false)
	h.a.pass(context.Background(), nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(context.Background(), nil)
	if len(h.net.programmed) != 0 || testutil.ToFloat64(h.metrics.Unredirected) != 1 {
		t.Errorf("programmed %d, gauge %v: want nothing programmed and the pod counted", len(h.net.programmed), testutil.ToFloat64(h.metrics.Unredirected))
	}
	evs := h.drainEvents()
	if len(evs) != 2 || !strings.Contains(evs[1], "cannot repair in place") {
		t.Errorf("events %q", evs)
	}
	// Reported once, not on every pass.
	h.a.pass(context.Background(), nil)
	if evs := h.drainEvents(); len(evs) != 0 || testutil.ToFloat64(h.metrics.Actions.WithLabelValues("repair", "failure")) != 1 {
		t.Errorf("repeated: %q", evs)
	}
}

// A pod whose proxy sets a boolean setting to something else than true or
// false started with the rules of false, as upstream's plugin starts it
// (a switch from it leaves no record): the audit finds nothing wrong with
// those rules, and repairs a pod that lost them to them, never to DNS
// capture's.
func TestProxyEnvNotABooleanIsHeldToFalse(t *testing.T) {
	notBool := func(name string) *corev1.Pod {
		p := meshed(name)
		p.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "ISTIO_META_DNS_CAPTURE", Value: "yes"}}
		return p
	}
	h := newHarness(t, Delete)
	h.add(notBool("dns"), true)
	h.passesPastConfirm()
	if evs := h.drainEvents(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+ReasonProxyEnvNotBool+" ") || testutil.ToFloat64(h.metrics.Unredirected) != 0 {
		t.Errorf("events %q, gauge %v: want only the note of the value, and no pod unredirected", evs, testutil.ToFloat64(h.metrics.Unredirected))
	}

	repaired := func(p *corev1.Pod) []iptables.Model {
		h := newHarness(t, Repair)
		h.add(p, false)
		h.passesPastConfirm()
		return h.net.programmed
	}
	got, unset := repaired(notBool("lost")), repaired(meshed("lost"))
	if len(got) != 1 || !reflect.DeepEqual(got, unset) {
		t.Errorf("repaired %+v, want the rules of the setting unset, %+v", got, unset)
	}
}

func TestGonePodsAreForgotten(t *testing.T) {
	h := newHarness(t, Report)
	h.add(meshed("gone"), false)
	h.a.pass(context.Background(), nil)
	h.clock.advance(3 * time.Second)
	h.a.pass(context.Background(), nil)
	h.pods.pods = nil
	h.a.pass(context.Background(), nil)
	if g := testutil.ToFloat64(h.metrics.Unredirected); g != 0 || len(h.a.pods) != 0 {
		t.Errorf("gauge %v, state %d after the pod left: want 0", g, len(h.a.pods))
	}
}

func mustDecide(t testing.TB, p *corev1.Pod) decision.Decision {
	t.Helper()
	kp, err := apipod.ToKube(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decision.Pod(kp)
	if err != nil || !d.Redirect {
		t.Fatalf("decision %+v, %v", d, err)
	}
	return d
}

func TestUncheckablePodsAreCounted(t *testing.T) {
	h := newHarness(t, Repair)
	h.add(meshed("seen"), true)
	h.pods.pods = append(h.pods.pods, meshed("no-process"))
	gone := meshed("pid-reused")
	h.add(gone, true)
	// Another namespace now answers at the path the lookup found.
	other := h.netns("other")
	h.ns[string(gone.UID)] = podnsWithPath(h.ns[string(gone.UID)], other.Path)
	h.a.fullPass(context.Background())
	if c, u := testutil.ToFloat64(h.metrics.Checked), testutil.ToFloat64(h.metrics.Unchecked); c != 1 || u != 2 {
		t.Errorf("checked %v, unchecked %v: want 1 and 2", c, u)
	}
	// The pass completed, unchecked pods and all: its end is stamped.
	if got, want := testutil.ToFloat64(h.metrics.LastPass), float64(h.clock.now().UnixNano())/1e9; got != want {
		t.Errorf("istio_cni_audit_last_pass_timestamp_seconds %v, want %v", got, want)
	}
	if len(h.net.programmed) != 0 {
		t.Error("acted on a namespace it could not verify")
	}
}

func podnsWithPath(n netnsdir.NSFile, path string) netnsdir.NSFile {
	n.Path = path
	return n
}

// staleNamespaces reports files in the netns directory that this view sees
// unbound, as netnsdir does when the mount stopped receiving the host's.
type staleNamespaces struct {
	fakeNamespaces
	stale int
}

func (s *staleNamespaces) Find(pods map[string][]netip.Addr) (netnsdir.Result, error) {
	res, err := s.fakeNamespaces.Find(pods)
	res.Stale = s.stale
	return res, err
}

// A view of the netns directory that no longer receives new namespaces
// fails /healthz (kubelet restarts the agent, whose new mount sees them);
// a fresh view beats again.
func TestStaleNetnsViewFailsHealth(t *testing.T) {
	h := newHarness(t, Repair)
	p := meshed("stale")
	h.pods.pods = append(h.pods.pods, p)
	ns := &staleNamespaces{fakeNamespaces: h.ns, stale: 1}
	h.a.deps.Namespaces = ns
	beats := health.NewBeats(h.clock.now)
	h.a.view = beats.Loop("netns view", 2*h.a.cfg.Interval+10*time.Second)
	ctx := context.Background()
	for range 3 {
		h.clock.advance(h.a.cfg.Interval)
		h.a.pass(ctx, nil)
	}
	h.clock.advance(10 * time.Second)
	if err := beats.Check(); err == nil || !strings.Contains(err.Error(), "netns view") {
		t.Errorf("health with a stale view: %v, want netns view silent", err)
	}
	ns.stale = 0
	h.a.pass(ctx, nil)
	if err := beats.Check(); err != nil {
		t.Errorf("health with a fresh view again: %v", err)
	}
}

// ADD skips its own read-back only while the audit reads back: proven by
// namespaces it has read, not assumed. A node with no meshed pod yet, or
// whose netns directory shows none of them (missing, empty, not the
// runtime's), leaves ADD verifying for itself.
func TestReadsBackOnlyOnceItHasReadANamespace(t *testing.T) {
	h := newHarness(t, Repair)
	if h.a.ReadsBack() {
		t.Fatal("ReadsBack before any pass")
	}
	h.a.pass(context.Background(), nil)
	if h.a.ReadsBack() {
		t.Error("ReadsBack after a pass with no meshed pod: it has read nothing")
	}
	h.add(meshed("a"), true)
	h.a.pass(context.Background(), nil)
	if !h.a.ReadsBack() {
		t.Error("not ReadsBack after checking a meshed pod's namespace")
	}
	// The directory goes away (a wrong mount after a restart): the next
	// full pass finds none of the pods.
	h.a.deps.Namespaces = netnsdir.Finder{Dir: filepath.Join(t.TempDir(), "no-such-netns-dir"), Since: time.Now()}
	h.add(meshed("b"), true)
	h.a.pass(context.Background(), nil)
	if h.a.ReadsBack() {
		t.Error("ReadsBack while a full pass found none of 2 meshed pods' namespaces")
	}
}

// A pod whose istio-validation failed as upstream's does without the rules
// (exit 126) waits in kubelet's backoff, no container running: it is a
// candidate between attempts too, and needs no confirmation (the container
// ran, so ADD is over). One pass repairs it, with an Event naming the
// validation; a pod whose validation ended otherwise, or that ended, is
// not a candidate.
func TestValidationCrashLoopIsRepairedBetweenAttempts(t *testing.T) {
	h := newHarness(t, Repair)
	looping := meshed("looping")
	looping.Status.Phase = corev1.PodPending
	looping.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name:                 DefaultValidationContainer,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: ValidationExitCode}},
		RestartCount:         5,
	}}
	other := meshed("other")
	other.Status.Phase = corev1.PodPending
	other.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name:  DefaultValidationContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}},
	}}
	passed := meshed("passed")
	passed.Status.Phase = corev1.PodPending
	passed.Status.InitContainerStatuses = []corev1.ContainerStatus{{
		Name:                 DefaultValidationContainer,
		State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: ValidationExitCode}},
	}}
	// restartPolicy Never: the pod failed for good, no attempt comes.
	ended := meshed("ended")
	ended.Status.Phase = corev1.PodFailed
	ended.Status.InitContainerStatuses = looping.Status.InitContainerStatuses
	h.add(looping, false)
	h.add(other, false)
	h.add(passed, true)
	h.add(ended, false)
	if n := h.a.pass(context.Background(), nil); n != 1 {
		t.Errorf("checked %d pods, want only the one in validation's backoff", n)
	}
	if u := testutil.ToFloat64(h.metrics.Unchecked); u != 0 {
		t.Errorf("%v pods unchecked, want none (the ended pod is no candidate)", u)
	}
	if len(h.net.programmed) != 1 {
		t.Fatalf("programmed %d times in the first pass, want 1: no confirmation for a failed validation", len(h.net.programmed))
	}
	evs := h.drainEvents()
	if len(evs) != 2 || !strings.Contains(evs[0], DefaultValidationContainer+" failed (exit 126)") || !strings.HasPrefix(evs[1], "Normal "+ReasonRepaired) {
		t.Errorf("events %q, want the validation's failure then the repair", evs)
	}
}

// The validation container is the configured one (upstream's
// repair.initContainerName): a pod whose container of that name failed
// with exit 126 is repaired between attempts; one whose istio-validation
// did is not, under that setting.
func TestValidationContainerIsConfigured(t *testing.T) {
	h := newHarness(t, Repair)
	h.a.cfg.ValidationContainer = "check-redirect"
	looping := func(name, container string) *corev1.Pod {
		p := meshed(name)
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
			Name:                 container,
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: ValidationExitCode}},
		}}
		return p
	}
	h.add(looping("configured", "check-redirect"), false)
	h.add(looping("default-name", DefaultValidationContainer), false)
	if n := h.a.pass(context.Background(), nil); n != 1 {
		t.Errorf("checked %d pods, want only the one whose check-redirect failed", n)
	}
	if evs := h.drainEvents(); len(evs) == 0 || !strings.Contains(evs[0], "check-redirect failed (exit 126)") {
		t.Errorf("events %q, want the configured container named", evs)
	}
}

// A sandbox ADD left no record of (a pod upstream's istio-cni started
// before a switch) whose proxy sets env vars the rules take as unset or
// false gets the Events ADD's report would have given it, once per pod
// and note; one ADD recorded gets them from its report, not here.
func TestProxyEnvNotedForSandboxesWithoutARecord(t *testing.T) {
	withEnv := func(name string, env ...corev1.EnvVar) *corev1.Pod {
		p := meshed(name)
		p.Spec.Containers[1].Env = env
		return p
	}
	fromField := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}
	h := newHarness(t, Repair)
	h.add(withEnv("unread", corev1.EnvVar{Name: "ISTIO_META_DNS_CAPTURE", ValueFrom: fromField}), true)
	h.add(withEnv("both", corev1.EnvVar{Name: "INVALID_DROP", ValueFrom: fromField}, corev1.EnvVar{Name: "ISTIO_DUAL_STACK", Value: "on"}), true)
	h.add(withEnv("plain"), true)
	recorded := withEnv("recorded", corev1.EnvVar{Name: "ISTIO_DUAL_STACK", Value: "on"})
	h.add(recorded, true)
	h.recordADD(t, recorded)
	h.passesPastConfirm()
	got := h.drainEvents()
	slices.Sort(got)
	want := []string{
		"Warning " + ReasonProxyEnvNotBool + " " + decision.NotBoolNote([]string{"ISTIO_DUAL_STACK"}),
		"Warning " + ReasonProxyEnvNotRead + " " + decision.UnreadNote([]string{"INVALID_DROP"}),
		"Warning " + ReasonProxyEnvNotRead + " " + decision.UnreadNote([]string{"ISTIO_META_DNS_CAPTURE"}),
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	h.passesPastConfirm()
	if again := h.drainEvents(); len(again) != 0 {
		t.Errorf("said again on later passes: %q", again)
	}
}
