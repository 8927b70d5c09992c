package audit

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
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
	Reconcile(ctx context.Context, netns string, m iptables.Model) error
	// ClearRules removes the rules of ours its writer writes, and no
	// policy route.
	ClearRules(ctx context.Context, netns string) error
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
	// Network reads and programs namespaces as one Writer does: the one
	// ADD recorded for the sandbox, else Config.Writer.
	Network func(applied.Writer) Network
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
	// ReasonProxyEnvNotRead: the rules take env vars of the pod's proxy
	// set with valueFrom as unset, as upstream does. ADD's report says so
	// of the pods it starts; the audit of those it has no record of.
	ReasonProxyEnvNotRead = "IstioProxyEnvNotRead"
	// ReasonProxyEnvNotBool: the rules take boolean env vars of the pod's
	// proxy set to something else than true or false as false, as the
	// proxy and upstream do. Said as ReasonProxyEnvNotRead is.
	ReasonProxyEnvNotBool = "IstioProxyEnvNotBool"
)

// Auditor checks the node's meshed pods; Run drives it.
type Auditor struct {
	cfg   Config
	deps  Deps
	alive *health.Beat
	view  *health.Beat // the netns directory's view is fresh
	stale bool         // said once while it is not
	// blind: the audit has not proven it sees the node's namespaces (none
	// checked yet, a full pass found none, or a stale view); read by
	// ReadsBack from other goroutines.
	blind atomic.Bool
	wake  chan string
	// after is time.After (gather's timers; tests fire their own).
	after func(time.Duration) <-chan time.Time
	pods  map[string]*podState // by pod UID
	// notes are what was said once of a pod (its settings changed, it has
	// no record), so it is not said every pass; by pod UID.
	notes map[string]string
	// said is, by pod UID and then topic, what was said of a pod that
	// another topic's note must not replace (sayOnce).
	said map[string]map[string]string
}

// New returns an auditor; call Run.
func New(cfg Config, deps Deps) *Auditor {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	a := &Auditor{cfg: cfg, deps: deps, wake: make(chan string, 256), after: time.After,
		pods: map[string]*podState{}, notes: map[string]string{}, said: map[string]map[string]string{}}
	a.blind.Store(true)
	return a
}

// ReadsBack reports whether the audit reads back, and repairs, what ADD
// programs: it repairs, and its last passes read meshed pods' namespaces
// from the node's netns directory. The plugin skips its own read-back only then. Safe
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

// Run checks the node's pods: all of them every Interval, woken ones soon
// (gather), suspects when their confirmation is due. It returns when ctx ends.
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
			if a.gather(ctx, only); ctx.Err() != nil {
				return // stopping: its checks would fail, and say so on the pods
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

// A woken pass waits for the wakes to pause for wakeQuiet, and no longer
// than wakeWithin after the first: the reads of a burst of pod starts then
// come in one pass after it, instead of a pass a pod while the node starts
// them (each a namespace scan and a process per pod). Only a pod the API
// reports started is checked (decide): a new pod's read-back comes with
// the status update that says so, after its ADD has answered.
const (
	wakeQuiet  = 20 * time.Millisecond
	wakeWithin = 250 * time.Millisecond
)

// gather adds to only the pods woken until the wakes pause (wakeQuiet),
// for at most wakeWithin.
func (a *Auditor) gather(ctx context.Context, only map[string]bool) {
	bound := a.after(wakeWithin)
	for {
		select {
		case <-ctx.Done():
			return
		case <-bound:
			return
		case <-a.after(wakeQuiet):
			return
		case u := <-a.wake:
			only[u] = true
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
	end := a.deps.Now()
	a.deps.Metrics.PassSeconds.Observe(end.Sub(start).Seconds())
	a.deps.Metrics.LastPass.Set(float64(end.UnixNano()) / 1e9)
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
