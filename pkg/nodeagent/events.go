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
