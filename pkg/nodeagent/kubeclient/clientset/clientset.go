// Package clientset adapts a client-go Clientset to kubeclient.Interface,
// for tests that drive the agent's code with client-go's fake Clientset.
// The agent itself never links it (cmd/install-cni's
// TestAgentLinksOnlyItsAPIGroups).
package clientset

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// Of returns cs as the agent's client.
func Of(cs kubernetes.Interface) kubeclient.Interface { return of{cs} }

type of struct{ cs kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on what the Clientset says: the
// fake one cannot stream an informer's first list.
func (o of) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(o.cs)
}

func (o of) Pods(ns string) kubeclient.PodClient { return o.cs.CoreV1().Pods(ns) }

func (o of) Nodes() kubeclient.Resource[*corev1.Node, *corev1.NodeList] { return o.cs.CoreV1().Nodes() }

func (o of) Namespaces() kubeclient.Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return o.cs.CoreV1().Namespaces()
}

func (o of) ConfigMaps(ns string) kubeclient.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return o.cs.CoreV1().ConfigMaps(ns)
}

func (o of) ServiceAccounts(ns string) kubeclient.ServiceAccountClient {
	return o.cs.CoreV1().ServiceAccounts(ns)
}

func (o of) Events(ns string) kubeclient.Resource[*corev1.Event, *corev1.EventList] {
	return o.cs.CoreV1().Events(ns)
}

func (o of) DaemonSets(ns string) kubeclient.Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return o.cs.AppsV1().DaemonSets(ns)
}

func (o of) Leases(ns string) kubeclient.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return o.cs.CoordinationV1().Leases(ns)
}

func (o of) MutatingWebhookConfigurations() kubeclient.Resource[*admissionv1.MutatingWebhookConfiguration, *admissionv1.MutatingWebhookConfigurationList] {
	return o.cs.AdmissionregistrationV1().MutatingWebhookConfigurations()
}
