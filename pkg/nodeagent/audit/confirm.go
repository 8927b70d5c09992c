package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// The confirmation state machine: a pod found without its rules is a
// suspect; still without them in the same namespace Confirm later, it is
// found, and the action runs.

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
	// otherKind: a sandbox with no record whose rules were found whole
	// as the other kind of writer than the node's writes them; they are
	// read there first.
	otherKind bool
	// unreadSince: when reading them there first began to fail
	// (applied.ErrUnreadWhereFound), a failed check, not a finding, for
	// Confirm; zero while it does not.
	unreadSince time.Time
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
	if why := a.recordedForAnother(c, ns.Inode, listed); why != "" {
		a.notChecked(c.pod, why, listed)
		return false
	}
	if r, ok := newerRecord(c.records, ns.Inode); ok {
		a.leftToANewerBuild(c.pod, r)
		return false
	}
	st := a.pods[uid]
	if st == nil || st.inode != ns.Inode {
		st = &podState{inode: ns.Inode}
		a.pods[uid] = st
	}
	checkCtx, cancel := context.WithTimeout(ctx, CheckBudget)
	defer cancel()
	m, writer, ok, err := a.want(c, ns)
	if !ok {
		return true // neither recorded for this sandbox nor meshed now
	}
	network := a.deps.Network(writer)
	var diffs []string
	var stray Network // no record: the other kind of writer, whose rules of ours a repair clears
	var otherKind bool
	switch {
	case err != nil:
		diffs, err = []string{"cannot build the rules: " + err.Error()}, nil
		m = iptables.Model{}
	case recordedFor(c, ns):
		diffs, err = network.Check(checkCtx, ns.Path, m)
	default:
		// No record: an earlier build's rules for the same settings
		// are the pod's too, and so are the other kind of writer's; a
		// repair writes this build's, the node's way, and clears the
		// other kind's.
		if st.otherKind && !st.unreadSince.IsZero() && a.deps.Now().Sub(st.unreadSince) >= a.cfg.Confirm {
			// Unreadable where last found for Confirm: read as a sandbox
			// of unknown kind, where a failed read holds nothing, so
			// that rules gone meanwhile are not hidden behind it.
			st.otherKind, st.unreadSince = false, time.Time{}
		}
		var held applied.Held
		held, err = applied.ReadUnrecorded(func(by applied.Writer, want iptables.Model) ([]string, error) {
			return a.deps.Network(by).Check(checkCtx, ns.Path, want)
		}, writer, c.decision, a.cfg.Settings, m, st.otherKind)
		diffs, otherKind = held.Diffs, err == nil && held.By != writer
		if otherKind {
			a.noteOtherKind(c, held.By)
		}
		if held.OtherErr != nil {
			// Taken as holding nothing there: the finding says so.
			diffs = append([]string{writer.OtherKind().Kind() + ": cannot read them: " + held.OtherErr.Error()}, diffs...)
		}
		stray = a.deps.Network(writer.OtherKind())
	}
	if err != nil {
		if errors.Is(err, applied.ErrUnreadWhereFound) && st.unreadSince.IsZero() {
			st.unreadSince = a.deps.Now()
		}
		if !errors.Is(err, podnet.ErrNoNetns) {
			a.deps.Metrics.Errors.Inc()
			a.deps.Log.Warn("audit: cannot check pod", "pod", podName(c.pod), "netns", found.Path, "error", err.Error())
		}
		return false
	}
	st.unreadSince = time.Time{}
	now := a.deps.Now()
	if len(diffs) == 0 {
		if st.found {
			a.deps.Log.Info("audit: pod has its redirect again", "pod", podName(c.pod))
		}
		*st = podState{inode: ns.Inode, otherKind: otherKind}
		return true
	}
	if st.suspect.IsZero() {
		st.suspect = now
	}
	if now.Sub(st.suspect) < a.cfg.Confirm && !c.validationFailed {
		a.deps.Log.Debug("audit: pod lacks its redirect; confirming", "pod", podName(c.pod), "diffs", diffs)
		return true
	}
	if !st.found {
		st.found = true
		a.deps.Metrics.Findings.Inc()
		msg := "running without its traffic redirect: " + summary(diffs)
		if c.validationFailed {
			msg = a.validationContainer() + " failed (exit 126) because the pod has no traffic redirect: " + summary(diffs)
		}
		a.deps.Log.Warn("audit: meshed pod running unredirected", "pod", podName(c.pod), "uid", uid,
			"netns", found.Path, "since", st.suspect.Format(time.RFC3339Nano), "diffs", diffs, "action", string(a.cfg.Action))
		a.deps.Events.Event(c.pod, corev1.EventTypeWarning, ReasonMissing, msg)
	}
	// The repair has a budget of its own: a slow check (the xtables lock)
	// must not leave it too little to finish, and fail half-way.
	actCtx, cancelAct := context.WithTimeout(ctx, CheckBudget)
	defer cancelAct()
	a.act(actCtx, c, ns, network, stray, m, st)
	return true
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

// summary keeps an Event's message short: the first differences.
func summary(diffs []string) string {
	const keep = 3
	if len(diffs) <= keep {
		return strings.Join(diffs, "; ")
	}
	return strings.Join(diffs[:keep], "; ") + fmt.Sprintf("; and %d more", len(diffs)-keep)
}
