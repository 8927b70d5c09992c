package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// Pods lists the pods bound to the node (an informer's cache).
type Pods interface {
	List() []*corev1.Pod
}

// Namespaces finds started pods' network namespaces by their addresses
// (netnsdir.Finder).
type Namespaces interface {
	Find(pods map[string][]netip.Addr) (netnsdir.Result, error)
}

// Network reads and programs a namespace (podnet.Network).
type Network interface {
	Check(ctx context.Context, netns string, m iptables.Model) ([]string, error)
	Program(ctx context.Context, netns string, m iptables.Model) error
	HasIPv6(netns string) (bool, error)
}

// Records are what ADD programmed in each sandbox (applied.Store).
type Records interface {
	ForPod(uid string) ([]applied.Record, error)
	// Owners are the records of one namespace, of any pod.
	Owners(inode uint64) ([]applied.Record, error)
	Prune(live func(uid string) bool) error
}

// PodActions are the API writes of the Delete and Label actions.
type PodActions interface {
	Delete(ctx context.Context, pod *corev1.Pod) error
	Label(ctx context.Context, pod *corev1.Pod, key, value string) error
}

// Deps are the audit's seams.
type Deps struct {
	Pods       Pods
	Namespaces Namespaces
	// Network reads and programs namespaces with one iptables backend:
	// the one ADD recorded for the sandbox, else Config.Backend.
	Network func(xtables.Backend) Network
	Records Records // nil: every pod is checked against its annotations
	Actions PodActions
	Events  record.EventRecorder
	Metrics *Metrics
	Log     *slog.Logger
	Now     func() time.Time
}

// CheckBudget bounds reading (and repairing) one pod's namespace.
const CheckBudget = 20 * time.Second

// Event reasons on the pod.
const (
	ReasonMissing  = "IstioRedirectMissing"
	ReasonRepaired = "IstioRedirectRepaired"
	ReasonFailed   = "IstioRedirectRepairFailed"
	ReasonDeleted  = "IstioRedirectPodDeleted"
	ReasonLabelled = "IstioRedirectPodLabelled"
	// ReasonSettingsChanged: the pod's traffic annotations differ from
	// what ADD applied; the audit keeps (and repairs to) what ADD applied.
	ReasonSettingsChanged = "IstioTrafficSettingsChanged"
	// ReasonNotChecked: the audit cannot prove which network namespace is
	// the pod's (another pod claims its address, or ADD recorded the
	// namespace for another pod), so it neither reads nor programs one.
	ReasonNotChecked = "IstioRedirectNotChecked"
)

// Auditor checks the node's meshed pods; Run drives it.
type Auditor struct {
	cfg   Config
	deps  Deps
	alive *health.Beat
	view  *health.Beat // the netns directory's view is fresh
	stale bool         // said once while it is not
	// blind: the last pass could not see the node's namespaces (a stale
	// view, or none read yet); read by ReadsBack from other goroutines.
	blind atomic.Bool
	wake  chan string
	pods  map[string]*podState // by pod UID
	// notes are what was said once of a pod (its settings changed, it has
	// no record), so it is not said every pass; by pod UID.
	notes map[string]string
}

// podState is what the audit remembers of one pod between checks.
type podState struct {
	// inode is the namespace last checked; a new sandbox starts afresh.
	inode uint64
	// suspect is when the pod was first seen without its rules in this
	// namespace; zero while it has them.
	suspect time.Time
	// found: confirmed unredirected and not fixed yet.
	found bool
	// acted: the label or delete was done (not repeated every pass).
	acted bool
}

// New returns an auditor; call Run.
func New(cfg Config, deps Deps) *Auditor {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	a := &Auditor{cfg: cfg, deps: deps, wake: make(chan string, 256), pods: map[string]*podState{}, notes: map[string]string{}}
	a.blind.Store(true)
	return a
}

// ReadsBack reports whether the audit reads back, and repairs, what ADD
// programs: it repairs, and its last look at the node's netns directory
// saw the namespaces. The plugin skips its own read-back only then. Safe
// from any goroutine.
func (a *Auditor) ReadsBack() bool { return a.cfg.Action == Repair && !a.blind.Load() }

// Wake asks for a check of one pod soon: its status changed, or the plugin
// reported on it. It never blocks; a full queue is covered by the next full
// pass.
func (a *Auditor) Wake(uid string) {
	select {
	case a.wake <- uid:
	default:
	}
}

// Run checks the node's pods: all of them every Interval, woken ones at
// once, suspects when their confirmation is due. It returns when ctx ends.
// Each finished pass and each pod checked beat "node audit" in beats
// (/healthz); each full pass whose view of the netns directory is fresh
// beats "netns view" (see noteStale). Liveness counts from this call: an
// API server that does not answer before is no reason to restart.
func (a *Auditor) Run(ctx context.Context, beats *health.Beats) {
	if beats != nil {
		bound := a.cfg.Interval + 2*CheckBudget + 10*time.Second
		a.alive, a.view = beats.Loop("node audit", bound), beats.Loop("netns view", 2*a.cfg.Interval+10*time.Second)
	}
	a.deps.Log.Info("node audit running", "action", string(a.cfg.Action), "interval", a.cfg.Interval.String(),
		"confirm", a.cfg.Confirm.String())
	full := time.NewTicker(a.cfg.Interval)
	defer full.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	a.fullPass(ctx)
	for {
		a.resetDue(due)
		select {
		case <-ctx.Done():
			return
		case <-full.C:
			a.fullPass(ctx)
		case uid := <-a.wake:
			only := map[string]bool{uid: true}
			for more := true; more; {
				select {
				case u := <-a.wake:
					only[u] = true
				default:
					more = false
				}
			}
			a.pass(ctx, only)
		case <-due.C:
			only := map[string]bool{}
			for uid, st := range a.pods {
				if !st.suspect.IsZero() {
					only[uid] = true
				}
			}
			a.pass(ctx, only)
		}
	}
}

// resetDue arms the timer for the earliest suspect's confirmation.
func (a *Auditor) resetDue(t *time.Timer) {
	var next time.Time
	for _, st := range a.pods {
		if !st.suspect.IsZero() && !st.found {
			at := st.suspect.Add(a.cfg.Confirm)
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	// Since Go 1.23, Stop and Reset discard a pending fire.
	t.Stop()
	if !next.IsZero() {
		// A confirmation already due was not resolved (the pod's process
		// or namespace was not found): retry, but never in a tight loop.
		d := next.Sub(a.deps.Now())
		if d <= 0 {
			d = max(min(a.cfg.Confirm, time.Second), 100*time.Millisecond)
		}
		t.Reset(d)
	}
}

func (a *Auditor) fullPass(ctx context.Context) {
	defer a.alive.Beat()
	start := a.deps.Now()
	checked := a.pass(ctx, nil)
	a.pruneRecords()
	a.deps.Metrics.Checked.Set(float64(checked))
	a.deps.Metrics.PassSeconds.Observe(a.deps.Now().Sub(start).Seconds())
}

// candidate is a started pod the decision says must be redirected, or
// one ADD redirected (it has records).
type candidate struct {
	pod      *corev1.Pod
	decision decision.Decision
	err      error // the pod must be redirected but its settings are invalid
	records  []applied.Record
}

// pass checks the pods in only (all pods when nil) and returns how many
// meshed pods it checked.
func (a *Auditor) pass(ctx context.Context, only map[string]bool) int {
	listed := map[string]*corev1.Pod{}
	var cands []candidate
	// Every pod that may hold an address, not only the candidates: a
	// candidate whose address another pod claims is matched to no
	// namespace (netnsdir.Find).
	ips := map[string][]netip.Addr{}
	for _, pod := range a.deps.Pods.List() {
		uid := string(pod.UID)
		listed[uid] = pod
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			ips[uid] = apipod.IPs(pod)
		}
		if only != nil && !only[uid] {
			continue
		}
		c, ok := a.decide(pod)
		if !ok {
			delete(a.pods, uid)
			continue
		}
		cands = append(cands, c)
	}
	for uid := range a.pods {
		if listed[uid] == nil && (only == nil || only[uid]) {
			delete(a.pods, uid) // gone from the node
		}
	}
	for uid := range a.notes {
		if listed[uid] == nil {
			delete(a.notes, uid)
		}
	}
	defer a.updateGauge()
	if len(cands) == 0 {
		a.view.Beat() // nothing to find: no view to doubt
		if !a.stale {
			a.blind.Store(false)
		}
		return 0
	}
	found, err := a.deps.Namespaces.Find(ips)
	if err != nil {
		a.deps.Metrics.Errors.Inc()
		a.deps.Log.Error("audit: finding pods' network namespaces", "error", err.Error())
		return 0
	}
	a.noteStale(found.Stale)
	checked, unchecked := 0, 0
	for _, c := range cands {
		a.alive.Beat()
		if why, ok := found.Ambiguous[string(c.pod.UID)]; ok {
			a.notChecked(c.pod, why, listed)
			unchecked++
			continue
		}
		ns, ok := found.Found[string(c.pod.UID)]
		if !ok || !a.check(ctx, c, ns, listed) {
			// A started pod whose namespace is not in the node's netns
			// directory (gone meanwhile, no addresses reported yet, a
			// runtime that binds namespaces elsewhere), is ambiguous, or
			// cannot be read. Counted, never silent.
			unchecked++
			continue
		}
		checked++
	}
	if only == nil {
		a.deps.Metrics.Unchecked.Set(float64(unchecked))
	}
	return checked
}

// decide keeps started, non-terminating pods the plugin must redirect.
func (a *Auditor) decide(pod *corev1.Pod) (candidate, bool) {
	if pod.DeletionTimestamp != nil || !started(pod) {
		return candidate{}, false
	}
	if _, decided := decision.Namespace(pod.Namespace, a.cfg.ExcludeNamespaces); decided {
		return candidate{}, false
	}
	var recs []applied.Record
	if a.deps.Records != nil {
		var err error
		if recs, err = a.deps.Records.ForPod(string(pod.UID)); err != nil {
			a.deps.Log.Warn("audit: reading records", "pod", podName(pod), "error", err.Error())
		}
	}
	kp, err := apipod.ToKube(pod)
	if err != nil {
		a.deps.Log.Error("audit: reading pod", "pod", podName(pod), "error", err.Error())
		return candidate{}, false
	}
	d, err := decision.Pod(kp)
	if err != nil {
		return candidate{pod: pod, err: err, records: recs}, true
	}
	return candidate{pod: pod, decision: d, records: recs}, d.Redirect || redirectedAtAdd(recs)
}

// redirectedAtAdd: ADD programmed one of the pod's sandboxes.
func redirectedAtAdd(recs []applied.Record) bool {
	for _, r := range recs {
		if !r.Passed {
			return true
		}
	}
	return false
}

// started: some container of the pod runs or ran in its current sandbox,
// i.e. ADD has completed for it (the runtime starts no container before).
func started(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return true
	case corev1.PodSucceeded, corev1.PodFailed:
		return false
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

// check compares one pod's namespace with its model and acts on a
// confirmed difference. It reports whether the namespace could be read.
func (a *Auditor) check(ctx context.Context, c candidate, found netnsdir.NSFile, listed map[string]*corev1.Pod) bool {
	uid := string(c.pod.UID)
	// Hold the namespace open for the whole check and repair, and use it
	// through our own descriptor: its file may be removed, and another
	// sandbox's bound at the same name, meanwhile.
	f, err := os.Open(found.Path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	if ino, err := netnsdir.Inode(f); err != nil || ino != found.Inode {
		return false // another namespace now answers at that name
	}
	ns := netnsdir.NSFile{Path: fmt.Sprintf("/proc/self/fd/%d", f.Fd()), Inode: found.Inode}
	if other := a.recordedForAnother(c, ns.Inode, listed); other != "" {
		a.notChecked(c.pod, "ADD recorded its network namespace for pod "+other, listed)
		return false
	}
	st := a.pods[uid]
	if st == nil || st.inode != ns.Inode {
		st = &podState{inode: ns.Inode}
		a.pods[uid] = st
	}
	checkCtx, cancel := context.WithTimeout(ctx, CheckBudget)
	defer cancel()
	m, backend, ok, err := a.want(c, ns)
	if !ok {
		return true // neither recorded for this sandbox nor meshed now
	}
	network := a.deps.Network(backend)
	var diffs []string
	if err != nil {
		diffs, err = []string{"cannot build the rules: " + err.Error()}, nil
		m = iptables.Model{}
	} else {
		diffs, err = network.Check(checkCtx, ns.Path, m)
	}
	if err != nil {
		if !errors.Is(err, podnet.ErrNoNetns) {
			a.deps.Metrics.Errors.Inc()
			a.deps.Log.Warn("audit: cannot check pod", "pod", podName(c.pod), "netns", found.Path, "error", err.Error())
		}
		return false
	}
	now := a.deps.Now()
	if len(diffs) == 0 {
		if st.found {
			a.deps.Log.Info("audit: pod has its redirect again", "pod", podName(c.pod))
		}
		*st = podState{inode: ns.Inode}
		return true
	}
	if st.suspect.IsZero() {
		st.suspect = now
	}
	if now.Sub(st.suspect) < a.cfg.Confirm {
		a.deps.Log.Debug("audit: pod lacks its redirect; confirming", "pod", podName(c.pod), "diffs", diffs)
		return true
	}
	if !st.found {
		st.found = true
		a.deps.Metrics.Findings.Inc()
		msg := "running without its traffic redirect: " + summary(diffs)
		a.deps.Log.Warn("audit: meshed pod running unredirected", "pod", podName(c.pod), "uid", uid,
			"netns", found.Path, "since", st.suspect.Format(time.RFC3339Nano), "diffs", diffs, "action", string(a.cfg.Action))
		a.deps.Events.Event(c.pod, corev1.EventTypeWarning, ReasonMissing, msg)
	}
	// The repair has a budget of its own: a slow check (the xtables lock)
	// must not leave it too little to finish, and fail half-way.
	actCtx, cancelAct := context.WithTimeout(ctx, CheckBudget)
	defer cancelAct()
	a.act(actCtx, c, ns, network, m, st)
	return true
}

// want is what the pod's namespace must hold: what ADD recorded for this
// sandbox, else (a sandbox from before records, or its record lost) what
// its annotations say now, as ADD computes it. ok=false: this sandbox was
// not redirected and the pod is not meshed now. The backend is the one ADD
// used for it, else the node's.
func (a *Auditor) want(c candidate, ns netnsdir.NSFile) (iptables.Model, xtables.Backend, bool, error) {
	uid := string(c.pod.UID)
	for _, r := range c.records {
		if r.NetnsInode == ns.Inode && r.Passed {
			return iptables.Model{}, "", false, nil // ADD left this sandbox alone
		}
		if r.NetnsInode == ns.Inode {
			a.noteSettingsChanged(c, r)
			b := a.cfg.Backend
			if r.Backend == xtables.Legacy || r.Backend == xtables.NFT {
				b = r.Backend
			}
			return r.Model(), b, true, nil
		}
	}
	if !c.decision.Redirect && c.err == nil {
		return iptables.Model{}, "", false, nil
	}
	if a.deps.Records != nil && a.notes[uid] != noteNoRecord {
		a.notes[uid] = noteNoRecord
		a.deps.Log.Info("audit: no record of what ADD applied to this sandbox (started before records were kept?); checking it against its annotations as they are now",
			"pod", podName(c.pod), "uid", uid)
	}
	if c.err != nil {
		return iptables.Model{}, a.cfg.Backend, true, c.err
	}
	m, err := a.model(c, ns)
	return m, a.cfg.Backend, true, err
}

const noteNoRecord = "no record"

// noteSettingsChanged reports, once per pod and change, that its traffic
// settings now differ from what ADD applied: Istio applies them only when
// a pod starts, and so does the audit.
func (a *Auditor) noteSettingsChanged(c candidate, r applied.Record) {
	uid := string(c.pod.UID)
	var now string
	switch {
	case c.err != nil:
		now = "invalid: " + c.err.Error()
	case !c.decision.Redirect:
		now = "no longer meshed: " + string(c.decision.Reason)
	default:
		if spec := decision.FinalSpec(c.decision, a.cfg.Settings); !applied.SameSpec(spec, r.Spec) {
			now = "changed: " + applied.SpecDiff(r.Spec, spec)
		}
	}
	if now == "" || a.notes[uid] == now {
		return
	}
	a.notes[uid] = now
	a.deps.Log.Warn("audit: the pod's traffic settings changed after it started; keeping what ADD applied", "pod", podName(c.pod), "uid", uid, "now", now)
	a.deps.Events.Eventf(c.pod, corev1.EventTypeWarning, ReasonSettingsChanged,
		"traffic settings changed after the pod started (%s); istio-cni keeps the rules applied at start: restart the pod to apply", now)
}

// noteStale follows the agent's view of the node's netns directory: files
// newer than the agent that are not namespaces mean its mount does not
// receive the host's new mounts (the directory was not a shared mount when
// the agent started). Pods started since cannot be found; /healthz then
// fails, so kubelet restarts the agent with a fresh view.
func (a *Auditor) noteStale(n int) {
	a.blind.Store(n > 0)
	switch {
	case n == 0:
		a.view.Beat()
		a.stale = false
	case !a.stale:
		a.stale = true
		a.deps.Log.Error("audit: this agent's view of the node's netns directory no longer receives new namespaces (it was not a shared mount when the agent started); /healthz fails so the agent is restarted", "stale_files", n)
	}
}

// pruneRecords drops the records of pods no longer on the node.
func (a *Auditor) pruneRecords() {
	if a.deps.Records == nil {
		return
	}
	live := map[string]bool{}
	for _, p := range a.deps.Pods.List() {
		live[string(p.UID)] = true
	}
	if err := a.deps.Records.Prune(func(uid string) bool { return live[uid] }); err != nil {
		a.deps.Log.Warn("audit: pruning records", "error", err.Error())
	}
}

// model is the pod's rule model, its families from its addresses and its
// namespace, exactly as ADD computes it.
func (a *Auditor) model(c candidate, ns netnsdir.NSFile) (iptables.Model, error) {
	stack, err := decision.Families(a.cfg.Settings.IPv6, c.decision.DualStack, apipod.IPs(c.pod), func() (bool, error) {
		return a.deps.Network(a.cfg.Backend).HasIPv6(ns.Path)
	})
	if err != nil {
		return iptables.Model{}, fmt.Errorf("reading the pod's addresses: %w", err)
	}
	return decision.Rules(c.decision, a.cfg.Settings, stack.V4, stack.V6), nil
}

func (a *Auditor) updateGauge() {
	n := 0
	for _, st := range a.pods {
		if st.found {
			n++
		}
	}
	a.deps.Metrics.Unredirected.Set(float64(n))
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// summary keeps an Event's message short: the first differences.
func summary(diffs []string) string {
	const keep = 3
	if len(diffs) <= keep {
		return strings.Join(diffs, "; ")
	}
	return strings.Join(diffs[:keep], "; ") + fmt.Sprintf("; and %d more", len(diffs)-keep)
}

// recordedForAnother names the live pod ADD recorded the namespace for,
// when that is not this pod: then the namespace this pod's address led to
// is provably another's (its reported address went to a new pod). ""
// when the namespace is this pod's own record, or nobody's.
func (a *Auditor) recordedForAnother(c candidate, ino uint64, listed map[string]*corev1.Pod) string {
	for _, r := range c.records {
		if r.NetnsInode == ino {
			return ""
		}
	}
	if a.deps.Records == nil {
		return ""
	}
	owners, err := a.deps.Records.Owners(ino)
	if err != nil {
		a.deps.Log.Warn("audit: reading records", "error", err.Error())
	}
	for _, r := range owners {
		if r.PodUID != string(c.pod.UID) && listed[r.PodUID] != nil {
			return podName(listed[r.PodUID])
		}
	}
	return ""
}

// notChecked says, once per pod and reason, that the audit leaves a pod
// alone because it cannot prove which namespace is the pod's: a log line
// and a Warning Event; the pod counts as unchecked.
func (a *Auditor) notChecked(pod *corev1.Pod, why string, listed map[string]*corev1.Pod) {
	for uid, p := range listed { // name the other pod for people
		why = strings.ReplaceAll(why, "pod "+uid, "pod "+podName(p))
	}
	uid := string(pod.UID)
	if a.notes[uid] == noteNotChecked+why {
		return
	}
	a.notes[uid] = noteNotChecked + why
	a.deps.Log.Warn("audit: not checking the pod: which network namespace is its own cannot be proven", "pod", podName(pod), "uid", uid, "why", why)
	a.deps.Events.Eventf(pod, corev1.EventTypeWarning, ReasonNotChecked,
		"istio-cni did not check or repair this pod's traffic redirect: %s", why)
}

const noteNotChecked = "not checked: "
