// Package missed finds the pods on the node that Istio's injector was meant
// to give a sidecar but did not (the injector was down when they were
// created, or its webhook ignores failures), and says so: a Warning Event
// on each such pod once, a gauge, a log line. Optionally it deletes such a
// pod when a controller owns it, so that the controller recreates it
// through the injector; never a bare pod, a bounded number per minute, and
// one pod per controller per backoff, so a still-absent injector does not
// make it delete the same workload's pods in a loop.
package missed

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/kube/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
)

// Mode is what the agent does with a pod that missed its injection.
type Mode string

const (
	// Report logs, counts and records the Event.
	Report Mode = "report"
	// Restart reports, and deletes the pod when a controller owns it.
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
	ReasonMissed    = "MissedSidecarInjection"
	ReasonRestarted = "MissedSidecarInjectionRestart"
	messageMissed   = "created without its sidecar: the injector did not mutate it; recreate it to join the mesh"
)

// restartable are the controllers that recreate a deleted pod.
var restartable = map[string]bool{"ReplicaSet": true, "StatefulSet": true, "DaemonSet": true, "Job": true}

// Config is the detector's configuration.
type Config struct {
	Mode Mode
	// RestartsPerMinute bounds deletions on this node.
	RestartsPerMinute int
	// OwnerBackoff is how long after deleting one of a controller's pods
	// its other pods are only reported: a replacement that missed its
	// injection too means the injector is still away.
	OwnerBackoff time.Duration
	// Excluded are the namespaces istio-cni leaves alone (its own and
	// EXCLUDE_NAMESPACES).
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
	// Delete deletes a pod with its UID as precondition.
	Delete func(ctx context.Context, pod *corev1.Pod) error
	Events record.EventRecorder
	// Missed is set to the number of pods found; Restarts counts
	// deletions by result.
	Missed   interface{ Set(float64) }
	Restarts func(result string)
	Log      *slog.Logger
	Now      func() time.Time
}

// Detector finds and reports the pods that missed their injection.
type Detector struct {
	cfg  Config
	deps Deps
	wake chan struct{}
	// reported holds the pods already reported, so each gets one Event.
	reported map[types.UID]bool
	// deleted holds the pods this agent deleted: never twice, even before
	// the cache shows them going.
	deleted map[types.UID]bool
	// restartedOwner is when one of a controller's pods was last deleted.
	restartedOwner map[types.UID]time.Time
	// restarts are the deletions of the last minute.
	restarts []time.Time
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
		reported: map[types.UID]bool{}, deleted: map[types.UID]bool{}, restartedOwner: map[types.UID]time.Time{}}
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
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
	missed := 0
	present := map[types.UID]bool{}
	for _, pod := range d.deps.Pods.List() {
		present[pod.UID] = true
		v, ok := d.judge(pod)
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
		if d.cfg.Mode == Restart {
			d.restart(ctx, pod)
		}
	}
	for _, m := range []map[types.UID]bool{d.reported, d.deleted} {
		for uid := range m {
			if !present[uid] {
				delete(m, uid)
			}
		}
	}
	d.deps.Missed.Set(float64(missed))
	return missed
}

// judge returns the verdict on a started pod whose namespace is known.
func (d *Detector) judge(pod *corev1.Pod) (injection.Verdict, bool) {
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
	return injection.Of(kp, labels, d.cfg.Excluded), true
}

// restart deletes pod when its controller recreates it, within the
// bounds.
func (d *Detector) restart(ctx context.Context, pod *corev1.Pod) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || !restartable[owner.Kind] || d.deleted[pod.UID] {
		return // reported only: nothing would recreate it; or already done
	}
	now := d.deps.Now()
	for uid, at := range d.restartedOwner {
		if now.Sub(at) >= d.cfg.OwnerBackoff {
			delete(d.restartedOwner, uid)
		}
	}
	if _, ok := d.restartedOwner[owner.UID]; ok {
		return
	}
	recent := d.restarts[:0]
	for _, t := range d.restarts {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	d.restarts = recent
	if len(d.restarts) >= d.cfg.RestartsPerMinute {
		return // the next pass tries again
	}
	d.restarts = append(d.restarts, now)
	d.restartedOwner[owner.UID] = now
	log := d.deps.Log.With("pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID), "owner", owner.Kind+"/"+owner.Name)
	if err := d.deps.Delete(ctx, pod); err != nil {
		d.deps.Restarts("error")
		log.Error("deleting a pod that missed its sidecar injection", "error", err.Error())
		return
	}
	d.deleted[pod.UID] = true
	d.deps.Restarts("deleted")
	log.Info("deleted a pod that missed its sidecar injection: its controller recreates it through the injector")
	d.deps.Events.Event(pod, corev1.EventTypeNormal, ReasonRestarted,
		fmt.Sprintf("deleted so that its %s %s recreates it through the sidecar injector", owner.Kind, owner.Name))
}
