package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
)

// apiRestarts keeps restart mode's shared state in the API, so that every
// node's agent sees it:
//   - an owner revision's round is a Lease in the pod's namespace, owned by
//     the controller (the garbage collector removes it with the
//     revision), created once: its creation time is when the round began;
//   - the cluster's budget is one Lease in the agent's namespace, its
//     annotation the evictions of the last minute, updated with the
//     resourceVersion as precondition (two agents never both take the
//     last one).
//
// The admission policy in the pod-writes RBAC lets the agent create only
// Leases of these names, and evict only in namespaces labelled for
// injection.
type apiRestarts struct {
	cs        kubeclient.Interface
	namespace string // the agent's
	perMinute int
	now       func() time.Time
}

// Lease names: RoundLeasePrefix + a hash of the revision; BudgetLease.
const (
	RoundLeasePrefix = "istio-cni-missed-injection-"
	BudgetLease      = RoundLeasePrefix + "budget"
	budgetAnnotation = "cni.istio.io/evictions"
)

var _ missed.Restarts = apiRestarts{}

// NewAPIRestarts is restart mode's shared state over cs, for the agent in
// namespace, at most perMinute evictions a minute across the cluster.
func NewAPIRestarts(cs kubeclient.Interface, namespace string, perMinute int) missed.Restarts {
	return apiRestarts{cs: cs, namespace: namespace, perMinute: perMinute, now: time.Now}
}

// Round creates the revision's Lease or reads the one another agent made.
func (r apiRestarts) Round(ctx context.Context, pod *corev1.Pod, rev missed.Revision) (time.Time, error) {
	sum := sha256.Sum256([]byte(rev.UID + "/" + rev.Hash))
	name := RoundLeasePrefix + hex.EncodeToString(sum[:8])
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: pod.Namespace,
		Labels:      map[string]string{"app.kubernetes.io/managed-by": "istio-cni"},
		Annotations: map[string]string{"cni.istio.io/restart-round": rev.String() + ": pods created before this Lease are evicted once, later ones only reported"},
		// ReplicaSets and StatefulSets are apps/v1.
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: rev.Kind, Name: rev.Name, UID: types.UID(rev.UID)}},
	}}
	leases := r.cs.Leases(pod.Namespace)
	made, err := leases.Create(ctx, lease, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		made, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("the restart round's Lease %s/%s: %w", pod.Namespace, name, err)
	}
	return made.CreationTimestamp.Time, nil
}

// evictTimeout bounds an eviction's API call. A slot is recorded at its
// take plus this, so that it holds its place in the budget until the
// eviction is done (at the latest then) and Settle moves it there: an
// answer slower than the minute cannot free the slot early.
const evictTimeout = 20 * time.Second

// Take records one eviction in the budget Lease, if the last minute has
// room for it.
func (r apiRestarts) Take(ctx context.Context) (missed.Slot, bool, error) {
	leases := r.cs.Leases(r.namespace)
	lease, err := leases.Get(ctx, BudgetLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: BudgetLease, Namespace: r.namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "istio-cni"}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return "", false, nil // another agent made it: a later pass
		}
	}
	if err != nil {
		return "", false, fmt.Errorf("the restart budget's Lease %s/%s: %w", r.namespace, BudgetLease, err)
	}
	now := r.now()
	recent := recentEvictions(lease.Annotations[budgetAnnotation], now)
	if len(recent) >= r.perMinute {
		return "", false, nil
	}
	slot := now.Add(evictTimeout).UTC().Format(time.RFC3339Nano)
	if _, err := leases.Update(ctx, withEvictions(lease, append(recent, slot)), metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return "", false, nil // another agent took one meanwhile: a later pass
		}
		return "", false, fmt.Errorf("the restart budget's Lease %s/%s: %w", r.namespace, BudgetLease, err)
	}
	return missed.Slot(slot), true, nil
}

// Settle replaces the slot's time with now, its eviction done; a slot
// already over a minute old is recorded anew. On a conflict it reads the
// Lease again, backing off as agents racing for the budget do: another
// agent's Take must not undo it.
func (r apiRestarts) Settle(ctx context.Context, slot missed.Slot) error {
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	leases := r.cs.Leases(r.namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		lease, err := leases.Get(ctx, BudgetLease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := r.now()
		recent := recentEvictions(lease.Annotations[budgetAnnotation], now)
		if i := slices.Index(recent, string(slot)); i >= 0 {
			recent = slices.Delete(recent, i, i+1)
		}
		_, err = leases.Update(ctx, withEvictions(lease, append(recent, now.UTC().Format(time.RFC3339Nano))), metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("the restart budget's Lease %s/%s: %w", r.namespace, BudgetLease, err)
	}
	return nil
}

// withEvictions sets the budget Lease's record of evictions.
func withEvictions(lease *coordinationv1.Lease, recorded []string) *coordinationv1.Lease {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[budgetAnnotation] = strings.Join(recorded, ",")
	return lease
}

// recentEvictions keeps the recorded evictions of the last minute. Each
// agent writes its node's clock: one over a minute ahead would otherwise
// hold the whole cluster's budget until its time came, so such entries
// are dropped (the bound then holds per group of agreeing clocks).
func recentEvictions(recorded string, now time.Time) []string {
	var out []string
	for _, s := range strings.Split(recorded, ",") {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil && now.Sub(t) < time.Minute && t.Sub(now) < time.Minute {
			out = append(out, s)
		}
	}
	return out
}

// Evict asks the API to evict the pod, as kubectl drain does, within
// evictTimeout.
func (r apiRestarts) Evict(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	uid := pod.UID
	err := r.cs.Pods(pod.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	if apierrors.IsTooManyRequests(err) {
		return fmt.Errorf("%w: %w", missed.ErrDisruptionBudget, err)
	}
	return err
}
