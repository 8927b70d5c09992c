package missed

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Restart mode, bounded so that it can neither loop nor stampede:
//
//   - only a pod whose controller recreates it from an unchanged template,
//     a ReplicaSet's or a StatefulSet's, is restarted; a bare pod, a
//     DaemonSet's (node infrastructure) or a Job's (its work would be lost)
//     is only reported;
//   - each owner revision (a ReplicaSet, or a StatefulSet at one
//     controller-revision-hash) has one restart round, ever, shared by every
//     node's agent (Restarts.Round): the pods created before the round began
//     are each evicted once; a pod created after it, a replacement that
//     missed its injection too (the injector is still away), is only
//     reported;
//   - a cluster-wide budget bounds evictions per minute (Restarts.Take),
//     whatever the number of nodes;
//   - the Eviction API, so PodDisruptionBudgets hold: an eviction they
//     refuse (or that fails) is tried again after a backoff (1 min,
//     doubling to 10), each try taking from the budget, so that a pod a
//     budget holds cannot drain it;
//   - only in a namespace labelled for injection (istio-injection=enabled,
//     or istio.io/rev without istio-injection), where the optional
//     admission policy lets the agent evict: a pod selected by its own
//     labels elsewhere is only reported.

// Revision names one revision of a pod's controller.
type Revision struct {
	Kind, Name, Namespace string
	UID                   string // the controller's
	// Hash is the StatefulSet's controller-revision-hash ("" for a
	// ReplicaSet, which is one revision).
	Hash string
}

func (r Revision) String() string {
	if r.Hash != "" {
		return fmt.Sprintf("%s %s/%s at revision %s", r.Kind, r.Namespace, r.Name, r.Hash)
	}
	return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
}

// Restarts is what restart mode shares across the cluster's agents.
type Restarts interface {
	// Round returns when the restart round of rev began (the API server's
	// time), beginning it now if none has.
	Round(ctx context.Context, pod *corev1.Pod, rev Revision) (time.Time, error)
	// Take takes one eviction from the cluster-wide budget of the last
	// minute; false when none is left (or another agent took the last one
	// meanwhile).
	Take(ctx context.Context) (Slot, bool, error)
	// Evict evicts the pod, UID as precondition; ErrDisruptionBudget when a
	// PodDisruptionBudget refuses it now.
	Evict(ctx context.Context, pod *corev1.Pod) error
	// Settle moves a taken slot to now, its eviction done: an eviction
	// counts for the minute after it was done, so that an API server slow
	// to answer cannot bunch evictions the budget spaced.
	Settle(ctx context.Context, s Slot) error
}

// Slot is one eviction taken from the budget, as the budget records it.
type Slot string

// ErrDisruptionBudget: a PodDisruptionBudget refused the eviction (429).
var ErrDisruptionBudget = errors.New("a PodDisruptionBudget refuses the eviction now")

// Event reasons of restart mode.
const (
	ReasonRestarted  = "MissedSidecarInjectionRestart"
	ReasonNoRestart  = "MissedSidecarInjectionNoRestart"
	revisionHashName = "controller-revision-hash"
)

// RevisionOf is the pod's controller revision, when a restart would
// bring the pod back from the same template; else why not.
func RevisionOf(pod *corev1.Pod) (Revision, string) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return Revision{}, "a bare pod: nothing would recreate it"
	}
	rev := Revision{Kind: owner.Kind, Name: owner.Name, Namespace: pod.Namespace, UID: string(owner.UID)}
	// By group too: a kind of another API group (OpenKruise's StatefulSet)
	// is not Kubernetes' controller; neither its template nor its
	// revisions are known here, nor would it own the round's Lease.
	gv, _ := schema.ParseGroupVersion(owner.APIVersion)
	switch {
	case gv.Group == "apps" && owner.Kind == "ReplicaSet":
		return rev, ""
	case gv.Group == "apps" && owner.Kind == "StatefulSet":
		rev.Hash = pod.Labels[revisionHashName]
		return rev, ""
	case gv.Group == "apps" && owner.Kind == "DaemonSet":
		return Revision{}, "a DaemonSet's pod: node infrastructure, not restarted"
	case gv.Group == "batch" && owner.Kind == "Job":
		return Revision{}, "a Job's pod: its work would be lost"
	}
	return Revision{}, fmt.Sprintf("its controller, a %s (%s), is not one istio-cni restarts", owner.Kind, owner.APIVersion)
}

// LabelledForInjection: the namespace's labels select it for injection
// as the restart admission policy checks them.
func LabelledForInjection(nsLabels map[string]string) bool {
	v, injection := nsLabels["istio-injection"]
	_, rev := nsLabels["istio.io/rev"]
	return (injection && v == "enabled") || (rev && !injection)
}

// Backoff after a refused or failed eviction.
const (
	firstRetry = time.Minute
	maxRetry   = 10 * time.Minute
)

// retry is when a pod whose eviction was refused may be tried again.
type retry struct {
	at    time.Time
	after time.Duration
}

// round is an owner revision's restart round: when it began (the API's
// time) and when this agent read it (its own).
type round struct{ began, read time.Time }

// restart evicts pod if the bounds allow it now; otherwise it says why,
// once.
func (d *Detector) restart(ctx context.Context, pod *corev1.Pod, nsLabels map[string]string) {
	if d.evicted[pod.UID] {
		return
	}
	if r, ok := d.retries[pod.UID]; ok && d.deps.Now().Before(r.at) {
		return
	}
	log := d.deps.Log.With("pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID))
	rev, why := RevisionOf(pod)
	if why == "" && !LabelledForInjection(nsLabels) {
		why = "its namespace is not labelled for injection (istio-injection=enabled, or istio.io/rev): the pod's own labels selected it, and istio-cni evicts only in labelled namespaces"
	}
	if why != "" {
		d.decline(pod, why)
		return
	}
	log = log.With("owner", rev.String())
	r, ok := d.rounds[rev]
	if !ok {
		began, err := d.deps.Restarts.Round(ctx, pod, rev)
		if err != nil {
			d.deps.Counted("error")
			log.Error("missed injection: reading the owner's restart round", "error", err.Error())
			return
		}
		// A round's start never changes: asked once per revision.
		r = round{began: began, read: d.deps.Now()}
		d.rounds[rev] = r
	}
	// Both times are the API server's, in whole seconds. A pod of the
	// round's own second is taken as from before it: on a fast node the
	// pod that begins the round runs within the second it was created,
	// and declining it would leave it out of the mesh for good.
	if pod.CreationTimestamp.After(r.began) {
		d.decline(pod, fmt.Sprintf("created after %s's restart round began (%s): the injector missed it too, so it is only reported; roll out %s again once the injector is back",
			rev, r.began.UTC().Format(time.RFC3339), rev.Kind))
		return
	}
	// Evict only once the round's second is over, so that the replacement
	// is created in a later one, which the check above tells apart. When
	// Round answered, the API server's clock had reached the round's
	// start: a second later by this node's clock, whatever their skew,
	// its second is over.
	if ready := r.read.Add(time.Second); d.deps.Now().Before(ready) {
		if d.wakeAt.IsZero() || ready.Before(d.wakeAt) {
			d.wakeAt = ready
		}
		return
	}
	slot, ok, err := d.deps.Restarts.Take(ctx)
	switch {
	case err != nil:
		d.deps.Counted("error")
		log.Error("missed injection: taking from the cluster's restart budget", "error", err.Error())
		return
	case !ok:
		d.deps.Counted("budget")
		return // a later pass
	}
	switch err := d.deps.Restarts.Evict(ctx, pod); {
	case errors.Is(err, ErrDisruptionBudget):
		d.deps.Counted("disruption_budget")
		log.Info("missed injection: eviction refused by a PodDisruptionBudget; trying again later", "in", d.backOff(pod).String())
		return
	case err != nil:
		d.deps.Counted("error")
		log.Error("missed injection: evicting", "error", err.Error(), "retry_in", d.backOff(pod).String())
		return
	}
	delete(d.retries, pod.UID)
	d.evicted[pod.UID] = true
	d.deps.Counted("evicted")
	log.Info("evicted a pod that missed its sidecar injection: its controller recreates it through the injector")
	d.deps.Events.Event(pod, corev1.EventTypeNormal, ReasonRestarted,
		fmt.Sprintf("evicted so that %s recreates it through the sidecar injector", rev))
	// After the Event, whose time is taken when it is made: the next
	// eviction's Event is then a minute or more after this one's.
	if err := d.deps.Restarts.Settle(ctx, slot); err != nil {
		log.Error("missed injection: recording the eviction's time in the cluster's restart budget; it counts from when its slot was taken", "error", err.Error())
	}
}

// backOff sets when the pod is tried again, and returns how long from now.
func (d *Detector) backOff(pod *corev1.Pod) time.Duration {
	after := firstRetry
	if r, ok := d.retries[pod.UID]; ok {
		after = min(2*r.after, maxRetry)
	}
	d.retries[pod.UID] = retry{at: d.deps.Now().Add(after), after: after}
	return after
}

// decline says once why a pod that missed its injection is not restarted.
func (d *Detector) decline(pod *corev1.Pod, why string) {
	if d.said[pod.UID] == why {
		return
	}
	d.said[pod.UID] = why
	d.deps.Log.Info("missed injection: not restarting", "pod", pod.Namespace+"/"+pod.Name, "why", why)
	d.deps.Events.Event(pod, corev1.EventTypeNormal, ReasonNoRestart, "not restarted: "+why)
}
