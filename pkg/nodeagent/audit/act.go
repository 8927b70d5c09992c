package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

// act does the configured action for a pod confirmed unredirected. A
// repair writes with network, then clears stray's rules of ours (nil:
// none to clear): a sandbox holds one redirect.
func (a *Auditor) act(ctx context.Context, c candidate, ns netnsdir.NSFile, network, stray Network, m iptables.Model, st *podState) {
	log := a.deps.Log.With("pod", podName(c.pod), "uid", string(c.pod.UID), "action", string(a.cfg.Action))
	switch a.cfg.Action {
	case Repair:
		if m.V4 == nil && m.V6 == nil {
			// The plugin refuses this pod's settings and nothing was
			// recorded at ADD: there are no rules to program, now or on
			// the next pass. Deleting or labelling is the operator's call.
			if !st.acted {
				st.acted = true
				why := c.err
				if why == nil {
					why = errors.New("no rules are known for this sandbox")
				}
				a.failed(c.pod, log, fmt.Errorf("cannot repair in place: %w", why))
			}
			return
		}
		start := a.deps.Now()
		err := network.Reconcile(ctx, ns.Path, m)
		if err != nil {
			a.failed(c.pod, log, err)
			return
		}
		if stray != nil {
			// The redirect is whole; what the other writer left of it
			// could only take a connection's NAT decision first.
			if err := stray.ClearRules(ctx, ns.Path); err != nil {
				log.Warn("audit: repaired, but the rules of ours another kind of writer left stay", "netns", ns.Path, "error", err.Error())
			}
		}
		ms := float64(a.deps.Now().Sub(start).Microseconds()) / 1000
		a.deps.Metrics.acted(Repair, true)
		log.Info("audit: repaired in place", "netns", ns.Path, "ms", ms)
		a.deps.Events.Eventf(c.pod, corev1.EventTypeNormal, ReasonRepaired,
			"istio-cni programmed the traffic redirect in the pod's network namespace (%.1f ms)", ms)
		*st = podState{inode: ns.Inode}
	case Delete:
		if st.acted {
			return
		}
		a.deps.Events.Event(c.pod, corev1.EventTypeWarning, ReasonDeleted,
			"istio-cni deletes the pod so that it restarts through the CNI chain")
		if err := a.deps.Actions.Delete(ctx, c.pod); err != nil {
			a.failed(c.pod, log, err)
			return
		}
		st.acted = true
		a.deps.Metrics.acted(Delete, true)
		log.Info("audit: pod deleted")
	case Label:
		if st.acted || c.pod.Labels[a.cfg.LabelKey] == a.cfg.LabelValue {
			return
		}
		if err := a.deps.Actions.Label(ctx, c.pod, a.cfg.LabelKey, a.cfg.LabelValue); err != nil {
			a.failed(c.pod, log, err)
			return
		}
		st.acted = true
		a.deps.Metrics.acted(Label, true)
		a.deps.Events.Eventf(c.pod, corev1.EventTypeWarning, ReasonLabelled, "istio-cni labelled the pod %s=%s", a.cfg.LabelKey, a.cfg.LabelValue)
		log.Info("audit: pod labelled", "label", a.cfg.LabelKey+"="+a.cfg.LabelValue)
	}
}

// failed records an action that did not work; the next pass tries again.
func (a *Auditor) failed(pod *corev1.Pod, log *slog.Logger, err error) {
	a.deps.Metrics.acted(a.cfg.Action, false)
	log.Error("audit: action failed", "error", err.Error())
	a.deps.Events.Eventf(pod, corev1.EventTypeWarning, ReasonFailed, "istio-cni could not %s the pod: %v", a.cfg.Action, err)
}
