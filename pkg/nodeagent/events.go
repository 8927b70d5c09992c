package nodeagent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// Component is the Events' source.
const Component = "istio-cni-node"

// Events records the agent's Events through the API: on pods (the audit's
// findings) and on its Node (a fight over the CNI config).
type Events struct {
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
}

func newEvents(cs kubeclient.Interface, node string) *Events {
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{})
	b.StartRecordingToSink(kubeclient.EventSink(cs))
	return &Events{broadcaster: b, recorder: b.NewRecorder(kubeclient.Scheme, corev1.EventSource{Component: Component, Host: node})}
}

// flush gives the last Events a moment, then stops (Shutdown drops what is
// still queued).
func (e *Events) flush() {
	time.Sleep(100 * time.Millisecond)
	e.broadcaster.Shutdown()
}

// Event reasons on the Node.
const (
	ReasonConflict       = "IstioCNIConfigConflict"
	ReasonConflictOver   = "IstioCNIConfigConflictOver"
	ReasonOtherInstaller = "IstioCNIOtherInstaller"
	// ReasonAPIUnreachable: the agent could not see the API server for a
	// while; posted once it answers again (apiSight).
	ReasonAPIUnreachable = "IstioCNIAPIUnreachable"
)

// nodeNotices reports what the installer finds on the node (fights, another
// installer) as Events on the Node, where `kubectl describe node` shows
// them.
type nodeNotices struct {
	events *Events
	node   string
}

// nodeRef is the Node as kubelet names it in its own Events (the UID is
// the node's name).
func nodeRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}

func (f nodeNotices) Fighting(x install.Fight) {
	if f.node == "" {
		return
	}
	f.events.recorder.Eventf(nodeRef(f.node), corev1.EventTypeWarning, ReasonConflict,
		"%s; istio-cni keeps repairing at most once a second, and is not ready until it stops", x)
}

func (f nodeNotices) Calm(x install.Fight) {
	if f.node == "" {
		return
	}
	f.events.recorder.Eventf(nodeRef(f.node), corev1.EventTypeNormal, ReasonConflictOver,
		"no repair of %s needed for %s: the other writer stopped", x.File, x.Window)
}

func (f nodeNotices) OtherInstaller(file string) {
	if f.node == "" {
		return
	}
	f.events.recorder.Eventf(nodeRef(f.node), corev1.EventTypeWarning, ReasonOtherInstaller,
		"upstream Istio's istio-cni is installed on this node too (its entry is in %s); this istio-cni chains its own plugin, under names upstream's never touches. "+
			"Finish the switch by uninstalling one of the two (docs/migration.md)", file)
}

// APIUnreachable says on the Node that the agent could not see the API
// server from since, for blind. It is called once the API answers again:
// the recorder queues the Event and posts it in the background, so it
// blocks nothing.
func (f nodeNotices) APIUnreachable(since time.Time, blind time.Duration, cause error) {
	if f.node == "" {
		return
	}
	why := "unknown"
	if cause != nil {
		why = cause.Error()
	}
	f.events.recorder.Eventf(nodeRef(f.node), corev1.EventTypeWarning, ReasonAPIUnreachable,
		"istio-cni's agent could not reach the API server for %s, from %s (%s): meanwhile its view of the node's pods was stale "+
			"(the audit, missed-injection checks and the plugin's pod lookups worked from it); the installed plugin and the node's readiness were unaffected",
		blind.Round(time.Second), since.UTC().Format(time.RFC3339), why)
}
