package missed

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
//     refuse is tried again on a later pass.

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
	Take(ctx context.Context) (bool, error)
	// Evict evicts the pod, UID as precondition; ErrDisruptionBudget when a
	// PodDisruptionBudget refuses it now.
	Evict(ctx context.Context, pod *corev1.Pod) error
}

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
	switch owner.Kind {
	case "ReplicaSet":
		return rev, ""
	case "StatefulSet":
		rev.Hash = pod.Labels[revisionHashName]
		return rev, ""
	case "DaemonSet":
		return Revision{}, "a DaemonSet's pod: node infrastructure, not restarted"
	case "Job":
		return Revision{}, "a Job's pod: its work would be lost"
	}
	return Revision{}, "its controller, a " + owner.Kind + ", is not one istio-cni restarts"
}

// restart evicts pod if the bounds allow it now; otherwise it says why,
// once.
func (d *Detector) restart(ctx context.Context, pod *corev1.Pod) {
	if d.evicted[pod.UID] {
		return
	}
	log := d.deps.Log.With("pod", pod.Namespace+"/"+pod.Name, "uid", string(pod.UID))
	rev, why := RevisionOf(pod)
	if why != "" {
		d.decline(pod, why)
		return
	}
	log = log.With("owner", rev.String())
	began, err := d.deps.Restarts.Round(ctx, pod, rev)
	if err != nil {
		d.deps.Counted("error")
		log.Error("missed injection: reading the owner's restart round", "error", err.Error())
		return
	}
	if !pod.CreationTimestamp.Time.Before(began) {
		d.decline(pod, fmt.Sprintf("created after %s's restart round began (%s): the injector missed it too, so it is only reported; roll out %s again once the injector is back",
			rev, began.UTC().Format(time.RFC3339), rev.Kind))
		return
	}
	ok, err := d.deps.Restarts.Take(ctx)
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
		log.Info("missed injection: eviction refused by a PodDisruptionBudget; trying again later")
		return
	case err != nil:
		d.deps.Counted("error")
		log.Error("missed injection: evicting", "error", err.Error())
		return
	}
	d.evicted[pod.UID] = true
	d.deps.Counted("evicted")
	log.Info("evicted a pod that missed its sidecar injection: its controller recreates it through the injector")
	d.deps.Events.Event(pod, corev1.EventTypeNormal, ReasonRestarted,
		fmt.Sprintf("evicted so that %s recreates it through the sidecar injector", rev))
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
