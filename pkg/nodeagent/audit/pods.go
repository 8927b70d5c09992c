package audit

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
)

// Which pods a pass looks at: the started pods the plugin must redirect
// or ADD redirected, and their namespaces found by address.

// candidate is a started pod the decision says must be redirected, or
// one ADD redirected (it has records).
type candidate struct {
	pod      *corev1.Pod
	decision decision.Decision
	err      error // the pod must be redirected but its settings are invalid
	records  []applied.Record
	// recordsErr: the pod's records could not be read; records then
	// says nothing, and the pod is not checked (what ADD applied is
	// unknown).
	recordsErr error
	// validationFailed: its istio-validation init container failed as
	// upstream's does without the rules (validationFailed).
	validationFailed bool
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
	for uid := range a.said {
		if listed[uid] == nil {
			delete(a.said, uid)
		}
	}
	defer a.updateGauge()
	if len(cands) == 0 {
		a.view.Beat() // nothing to find: no view to doubt
		return 0
	}
	found, err := a.deps.Namespaces.Find(ips)
	if err != nil {
		a.blind.Store(true)
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
	// The audit reads back only what it has seen itself: a namespace read
	// and checked. A full pass that found none of the meshed pods'
	// namespaces (the directory empty, missing, or not the runtime's) is
	// blind, as is a stale view; one pod not found yet is not.
	switch {
	case found.Stale > 0:
		a.blind.Store(true)
	case checked > 0:
		a.blind.Store(false)
	case only == nil:
		a.blind.Store(true)
	}
	return checked
}

// decide keeps started, non-terminating pods the plugin must redirect.
func (a *Auditor) decide(pod *corev1.Pod) (candidate, bool) {
	failed := validationFailed(pod, a.validationContainer())
	if pod.DeletionTimestamp != nil || (!started(pod) && !failed) {
		return candidate{}, false
	}
	if _, decided := decision.Namespace(pod.Namespace, a.cfg.ExcludeNamespaces); decided {
		return candidate{}, false
	}
	var recs []applied.Record
	var recsErr error
	if a.deps.Records != nil {
		if recs, recsErr = a.deps.Records.ForPod(string(pod.UID)); recsErr != nil {
			a.deps.Log.Warn("audit: reading records", "pod", podName(pod), "error", recsErr.Error())
		}
	}
	kp, err := apipod.ToKube(pod)
	if err != nil {
		a.deps.Log.Error("audit: reading pod", "pod", podName(pod), "error", err.Error())
		return candidate{}, false
	}
	d, err := decision.Pod(kp)
	if err != nil {
		return candidate{pod: pod, err: err, records: recs, recordsErr: recsErr, validationFailed: failed}, true
	}
	return candidate{pod: pod, decision: d, records: recs, recordsErr: recsErr, validationFailed: failed}, d.Redirect || redirectedAtAdd(recs)
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

// Istio's injector, with its CNI enabled, puts istio-validation first
// among a pod's init containers: pilot-agent's `istio-iptables
// --run-validation` checks that its connections are redirected and exits
// ValidationExitCode when they are not.
const (
	DefaultValidationContainer = "istio-validation"
	ValidationExitCode         = 126
)

func (a *Auditor) validationContainer() string {
	if a.cfg.ValidationContainer != "" {
		return a.cfg.ValidationContainer
	}
	return DefaultValidationContainer
}

// validationFailed: the pod's istio-validation init container ended with
// ValidationExitCode, and the pod has not got past it: it waits in
// kubelet's backoff (Init:CrashLoopBackOff), when no container of the pod
// runs, or is being retried. Its ADD is over (the container ran), so the
// pod needs no confirmation either.
func validationFailed(pod *corev1.Pod, container string) bool {
	// A pod that ended (restartPolicy Never) is never tried again.
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name != container {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.ExitCode == ValidationExitCode && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0) {
				return true
			}
		}
	}
	return false
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
