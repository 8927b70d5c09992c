package audit

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
)

// What is said once: a change of a pod's settings, a pod not checked and
// why, a stale view of the netns directory.

const noteNoRecord = "no record"

// noteSettingsChanged reports, once per pod and change, that its traffic
// settings now differ from what ADD applied: Istio applies them only when
// a pod starts, and so does the audit. That includes a sandbox ADD passed
// through whose pod is meshed now (its annotations edited, or its
// namespace no longer excluded): it stays unredirected, said out loud.
func (a *Auditor) noteSettingsChanged(c candidate, r applied.Record) {
	uid := string(c.pod.UID)
	var now string
	switch {
	case r.Passed:
		if c.err != nil || !c.decision.Redirect {
			return
		}
		now = "meshed now, but ADD left this sandbox unredirected"
	case c.err != nil:
		now = "invalid: " + c.err.Error()
	case !c.decision.Redirect:
		now = "no longer meshed: " + string(c.decision.Reason)
	default:
		if spec := decision.FinalSpec(c.decision, a.cfg.Settings); !applied.SameSettings(r.Spec, spec) {
			now = "changed: " + applied.SpecDiff(r.Spec, spec)
		}
	}
	if now == "" || a.notes[uid] == now {
		return
	}
	a.notes[uid] = now
	a.deps.Log.Warn("audit: the pod's traffic settings changed after it started; keeping what ADD applied", "pod", podName(c.pod), "uid", uid, "now", now)
	a.deps.Events.Eventf(c.pod, corev1.EventTypeWarning, ReasonSettingsChanged,
		"traffic settings changed after the pod started (%s); istio-cni keeps the rules applied at start: restart the pod to apply", now)
}

// noteStale follows the agent's view of the node's netns directory: files
// newer than the agent that are not namespaces mean its mount does not
// receive the host's new mounts (the directory was not a shared mount when
// the agent started). Pods started since cannot be found; /healthz then
// fails, so kubelet restarts the agent with a fresh view.
func (a *Auditor) noteStale(n int) {
	switch {
	case n == 0:
		a.view.Beat()
		a.stale = false
	case !a.stale:
		a.stale = true
		a.deps.Log.Error("audit: this agent's view of the node's netns directory no longer receives new namespaces (it was not a shared mount when the agent started); /healthz fails so the agent is restarted", "stale_files", n)
	}
}

// notChecked says, once per pod and reason, that the audit leaves a pod
// alone because it cannot prove which namespace is the pod's: a log line
// and a Warning Event; the pod counts as unchecked.
func (a *Auditor) notChecked(pod *corev1.Pod, why string, listed map[string]*corev1.Pod) {
	for uid, p := range listed { // name the other pod for people
		why = strings.ReplaceAll(why, "pod "+uid, "pod "+podName(p))
	}
	uid := string(pod.UID)
	if a.notes[uid] == noteNotChecked+why {
		return
	}
	a.notes[uid] = noteNotChecked + why
	a.deps.Log.Warn("audit: not checking the pod: which network namespace is its own cannot be proven", "pod", podName(pod), "uid", uid, "why", why)
	a.deps.Events.Eventf(pod, corev1.EventTypeWarning, ReasonNotChecked,
		"istio-cni did not check or repair this pod's traffic redirect: %s", why)
}

const noteNotChecked = "not checked: "

// newerRecord is the sandbox's record when a later build wrote it.
func newerRecord(recs []applied.Record, ino uint64) (applied.Record, bool) {
	for _, r := range recs {
		if r.NetnsInode == ino && r.Newer() {
			return r, true
		}
	}
	return applied.Record{}, false
}

// leftToANewerBuild says, once per pod, that the audit leaves a sandbox
// alone whose record a later build wrote (this agent was rolled back): what
// that build applied is not known here, and a repair to what this build
// would apply could strip what it added. The pod counts as unchecked; no
// Event, since a rollback would put one on every meshed pod.
func (a *Auditor) leftToANewerBuild(pod *corev1.Pod, r applied.Record) {
	uid := string(pod.UID)
	if a.notes[uid] == noteNewerRecord {
		return
	}
	a.notes[uid] = noteNewerRecord
	a.deps.Log.Warn("audit: not checking the pod: its sandbox's record was written by a newer istio-cni, whose rules this agent cannot know; it is left as it is until that version runs again or the pod restarts",
		"pod", podName(pod), "uid", uid, "container", r.Container, "record_version", r.Version, "reads_up_to", applied.Version)
}

const noteNewerRecord = "newer record"

// noteProxyEnv says, once per pod and what is said, which env vars of its
// proxy the rules of a sandbox ADD left no record of take as unset
// (valueFrom) or false (not a boolean): a pod upstream's istio-cni started
// before a switch, which this agent never had a report of. ADD's report
// says it of the pods this plugin starts (so those are not said twice).
func (a *Auditor) noteProxyEnv(c candidate) {
	var said []string
	for _, n := range []struct {
		names  []string
		reason string
		note   func([]string) string
	}{
		{c.decision.Unread, ReasonProxyEnvNotRead, decision.UnreadNote},
		{c.decision.NotBool, ReasonProxyEnvNotBool, decision.NotBoolNote},
	} {
		if len(n.names) > 0 {
			said = append(said, n.reason+": "+n.note(n.names))
		}
	}
	uid := string(c.pod.UID)
	if !a.sayOnce(uid, "proxy env", strings.Join(said, "\n")) {
		return
	}
	for _, s := range said {
		reason, msg, _ := strings.Cut(s, ": ")
		a.deps.Log.Warn("audit: the pod's rules take some of its proxy's env vars as unset or false", "pod", podName(c.pod), "uid", uid, "note", msg)
		a.deps.Events.Event(c.pod, corev1.EventTypeWarning, reason, msg)
	}
}

// noteOtherKind says, once per pod, that a sandbox ADD left no record of
// holds its rules as the other kind of writer writes them (native
// nftables on a node writing iptables, or iptables on a native one): a pod
// upstream's istio-cni started with another global.nativeNftables. It is
// redirected; a restart gives it the node's writer.
func (a *Auditor) noteOtherKind(c candidate, w applied.Writer) {
	kind := w.Kind()
	if a.sayOnce(string(c.pod.UID), "writer", kind) {
		a.deps.Log.Info("audit: no record of this sandbox; its rules are "+kind+", which this node's plugin does not write (native_nftables differs from the plugin that started it); taking them for the pod's",
			"pod", podName(c.pod), "uid", string(c.pod.UID))
	}
}

// sayOnce records that what is said of a pod on a topic is now s, and
// reports whether it was not said already ("" is never said).
func (a *Auditor) sayOnce(uid, topic, s string) bool {
	if a.said[uid][topic] == s {
		return false
	}
	if a.said[uid] == nil {
		a.said[uid] = map[string]string{}
	}
	a.said[uid][topic] = s
	return true
}
