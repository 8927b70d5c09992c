package audit

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/nodeagent/apipod"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
)

// What a pod's namespace must hold, and whether that namespace is
// provably the pod's.

// want is what the pod's namespace must hold: what ADD recorded for this
// sandbox, else (a sandbox from before records, or its record lost) what
// its annotations say now, as ADD computes it. ok=false: this sandbox was
// not redirected and the pod is not meshed now. The writer is the one ADD
// used for it, else the node's.
func (a *Auditor) want(c candidate, ns netnsdir.NSFile) (iptables.Model, applied.Writer, bool, error) {
	uid := string(c.pod.UID)
	for _, r := range c.records {
		if r.NetnsInode != ns.Inode {
			continue
		}
		m, known := r.Model()
		if !known || r.Passed {
			// ADD left this sandbox alone, or a newer build recorded it
			// (check leaves those to it before asking).
			if known {
				a.noteSettingsChanged(c, r)
			}
			return iptables.Model{}, applied.Writer{}, false, nil
		}
		a.noteSettingsChanged(c, r)
		return m, r.Writer(a.cfg.Writer), true, nil
	}
	if !c.decision.Redirect && c.err == nil {
		return iptables.Model{}, applied.Writer{}, false, nil
	}
	if a.deps.Records != nil && a.notes[uid] != noteNoRecord {
		a.notes[uid] = noteNoRecord
		a.deps.Log.Info("audit: no record of what ADD applied to this sandbox (started before records were kept?); checking it against its annotations as they are now",
			"pod", podName(c.pod), "uid", uid)
	}
	if c.err != nil {
		return iptables.Model{}, a.cfg.Writer.Guess(), true, c.err
	}
	a.noteProxyEnv(c)
	m, err := a.model(c, ns)
	return m, a.cfg.Writer.Guess(), true, err
}

// recordedFor says whether ADD left a record of this sandbox.
func recordedFor(c candidate, ns netnsdir.NSFile) bool {
	for _, r := range c.records {
		if r.NetnsInode == ns.Inode {
			return true
		}
	}
	return false
}

// model is the pod's rule model, its families from its addresses and its
// namespace, exactly as ADD computes it.
func (a *Auditor) model(c candidate, ns netnsdir.NSFile) (iptables.Model, error) {
	stack, err := decision.Families(a.cfg.Settings.IPv6, c.decision.DualStack, apipod.IPs(c.pod), func() (bool, error) {
		return a.deps.Network(a.cfg.Writer).HasIPv6(ns.Path)
	})
	if err != nil {
		return iptables.Model{}, fmt.Errorf("reading the pod's addresses: %w", err)
	}
	return decision.Rules(c.decision, a.cfg.Settings, stack.V4, stack.V6), nil
}

// recordedForAnother says why the namespace this pod's address led to is
// not to be checked as its own: ADD recorded it for another live pod (the
// pod's reported address went to a new pod), or the records cannot tell.
// "" when it is this pod's own record, or nobody's.
func (a *Auditor) recordedForAnother(c candidate, ino uint64, listed map[string]*corev1.Pod) string {
	if c.recordsErr != nil {
		// Without its own record a repair would follow the annotations
		// as they are now, which may have been weakened since ADD.
		return "the pod's records of sandboxes cannot be read (" + c.recordsErr.Error() + ")"
	}
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
		// It may be another pod's: never programmed on a guess.
		return "the node's records of sandboxes cannot be read (" + err.Error() + ")"
	}
	for _, r := range owners {
		if r.PodUID != string(c.pod.UID) && listed[r.PodUID] != nil {
			return "ADD recorded its network namespace for pod " + podName(listed[r.PodUID])
		}
	}
	return ""
}
