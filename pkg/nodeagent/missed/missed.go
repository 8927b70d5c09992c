// Package missed finds the pods on the node that Istio's injector was meant
// to give a sidecar but did not (the injector was down when they were
// created, and its webhook let them through), and says so: a Warning Event
// on each such pod once, a gauge, a log line. Optionally (restart mode) it
// evicts such a pod so that its controller recreates it through the
// injector, within bounds that hold across the cluster (restart.go).
package missed

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
)

// Mode is what the agent does with a pod that missed its injection.
type Mode string

const (
	// Report logs, counts and records the Event.
	Report Mode = "report"
	// Restart reports, and evicts the pod so that its controller
	// recreates it (restart.go).
	Restart Mode = "restart"
	// Off finds nothing.
	Off Mode = "off"
)

// Modes lists the valid values, for error messages.
const Modes = "report, restart or off"

// ParseMode validates a configured mode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Report, Restart, Off:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q: want %s", s, Modes)
}

// Event reasons and messages.
const (
	ReasonMissed  = "MissedSidecarInjection"
	messageMissed = "created without its sidecar: the injector did not mutate it; recreate it to join the mesh"
)

// Config is the detector's configuration.
type Config struct {
	Mode Mode
	// Excluded are the namespaces istio-cni leaves alone
	// (EXCLUDE_NAMESPACES).
	Excluded []string
	// Interval is the period of the full pass; pod and namespace changes
	// wake it sooner.
	Interval time.Duration
}

// Deps are the detector's seams.
type Deps struct {
	// Pods are the node's pods (podcache.Pods).
	Pods interface{ List() []*corev1.Pod }
	// NamespaceLabels returns a namespace's labels, false when it is not
	// known (yet).
	NamespaceLabels func(name string) (map[string]string, bool)
	// Injectors is the cluster's sidecar injectors as last read (or the
	// istio-discovery chart's, where they cannot be).
	Injectors func(ctx context.Context) injection.View
	// Restarts is the cluster-wide state of restart mode; nil in report
	// mode.
	Restarts Restarts
	Events   record.EventRecorder
	// Missed is set to the number of pods found; Counted counts restart
	// attempts by result.
	Missed  interface{ Set(float64) }
	Counted func(result string)
	Log     *slog.Logger
	Now     func() time.Time
}

// Detector finds and reports the pods that missed their injection.
type Detector struct {
	cfg  Config
	deps Deps
	wake chan struct{}
	// reported holds the pods already reported, so each gets one Event.
	reported map[types.UID]bool
	// evicted holds the pods this agent evicted: never twice, even before
	// the cache shows them going.
	evicted map[types.UID]bool
	// said holds the pods whose restart was declined, and why, so it is
	// said once.
	said map[types.UID]string
	// retries holds the pods whose eviction was refused: when to try again.
	retries map[types.UID]retry
	// rounds caches each owner revision's restart round.
	rounds map[Revision]round
	// wakeAt is when the last pass's earliest put-off eviction is due;
	// zero when none is.
	wakeAt time.Time
}

// New builds a detector.
func New(cfg Config, deps Deps) *Detector {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 30 * time.Second
	}
	return &Detector{cfg: cfg, deps: deps, wake: make(chan struct{}, 1),
		reported: map[types.UID]bool{}, evicted: map[types.UID]bool{}, said: map[types.UID]string{},
		retries: map[types.UID]retry{}, rounds: map[Revision]round{}}
}

// Wake asks for a pass soon; it never blocks.
func (d *Detector) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run passes over the node's pods until ctx ends: at once, on each wake
// (batched over a short settle, as a burst of pod changes arrives
// together) and every Interval.
func (d *Detector) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.Pass(ctx)
		// An eviction put off to the end of its round's second is due
		// then, not at the next full pass.
		var due <-chan time.Time
		if !d.wakeAt.IsZero() {
			// Unstopped, it is collected once it fires or is dropped.
			due = time.After(d.wakeAt.Sub(d.deps.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-due:
		case <-d.wake:
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// Pass judges every started pod once; it returns how many missed their
// injection.
func (d *Detector) Pass(ctx context.Context) int {
	d.wakeAt = time.Time{}
	missed := 0
	present := map[types.UID]bool{}
	revs := map[Revision]bool{}
	view := d.deps.Injectors(ctx)
	for _, pod := range d.deps.Pods.List() {
		present[pod.UID] = true
		v, ok := d.judge(pod, view)
		if !ok || !v.Missed() {
			continue
		}
		missed++
		if !d.reported[pod.UID] {
			d.reported[pod.UID] = true
			d.deps.Log.Warn("pod missed its sidecar injection", "pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID),
				"why", v.Why, "mode", string(d.cfg.Mode))
			d.deps.Events.Event(pod, corev1.EventTypeWarning, ReasonMissed, messageMissed+" ("+v.Why+")")
		}
		if d.cfg.Mode == Restart && d.deps.Restarts != nil {
			labels, _ := d.deps.NamespaceLabels(pod.Namespace)
			d.restart(ctx, pod, labels)
			if rev, why := RevisionOf(pod); why == "" {
				revs[rev] = true
			}
		}
	}
	for _, m := range []map[types.UID]bool{d.reported, d.evicted} {
		for uid := range m {
			if !present[uid] {
				delete(m, uid)
			}
		}
	}
	for uid := range d.said {
		if !present[uid] {
			delete(d.said, uid)
		}
	}
	for uid := range d.retries {
		if !present[uid] {
			delete(d.retries, uid)
		}
	}
	// A revision no missed pod of this node names any more is forgotten:
	// the cache stays as small as the node's missed pods.
	for rev := range d.rounds {
		if !revs[rev] {
			delete(d.rounds, rev)
		}
	}
	d.deps.Missed.Set(float64(missed))
	return missed
}

// judge returns the verdict on a started pod whose namespace is known.
func (d *Detector) judge(pod *corev1.Pod, view injection.View) (injection.Verdict, bool) {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return injection.Verdict{}, false
	}
	labels, ok := d.deps.NamespaceLabels(pod.Namespace)
	if !ok {
		return injection.Verdict{}, false
	}
	kp, err := apipod.ToKube(pod)
	if err != nil {
		return injection.Verdict{}, false
	}
	return injection.Of(kp, labels, d.cfg.Excluded, view), true
}
