// Package kubeclient is the node agent's API client: typed clients for
// just the kinds the agent reads and writes (client-go's gentype, as its
// generated clients are built), over REST clients whose scheme registers
// just their groups. client-go's Clientset links and registers every
// built-in API group when the process starts, 53 packages of types
// the agent never asks for: 6 MB of its resident memory on every node
// (BENCHMARKS.md, "Node agent").
package kubeclient

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"
)

// Resource is what the agent asks of one kind. client-go's generated typed
// clients have these methods too, so a Clientset (a fake one in tests) can
// stand in (package clientset).
type Resource[T, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// PodClient is the pods of one namespace, and their eviction.
type PodClient interface {
	Resource[*corev1.Pod, *corev1.PodList]
	EvictV1(ctx context.Context, eviction *policyv1.Eviction) error
}

// ServiceAccountClient is the ServiceAccounts of one namespace, and their
// tokens.
type ServiceAccountClient interface {
	Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	CreateToken(ctx context.Context, name string, req *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// Interface is every kind the agent reads or writes.
type Interface interface {
	Pods(namespace string) PodClient
	Nodes() Resource[*corev1.Node, *corev1.NodeList]
	Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList]
	ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	ServiceAccounts(namespace string) ServiceAccountClient
	Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
	DaemonSets(namespace string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList]
	Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	MutatingWebhookConfigurations() Resource[*admissionv1.MutatingWebhookConfiguration, *admissionv1.MutatingWebhookConfigurationList]
}

// client is Interface over the API server: one REST client a group
// version, sharing one HTTP client (its connections), as a Clientset's do.
type client struct {
	core, apps, coordination, admission rest.Interface
}

// New returns the client for rc. The User-Agent goes on rc before its HTTP
// client is built: only the transport sets the header, and the API server
// names the agent's field manager and audit entries after it.
func New(rc *rest.Config) (Interface, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	h, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	var c client
	for _, g := range []struct {
		into *rest.Interface
		gv   schema.GroupVersion
		path string
	}{
		{&c.core, corev1.SchemeGroupVersion, "/api"},
		{&c.apps, appsv1.SchemeGroupVersion, "/apis"},
		{&c.coordination, coordinationv1.SchemeGroupVersion, "/apis"},
		{&c.admission, admissionv1.SchemeGroupVersion, "/apis"},
	} {
		if *g.into, err = restClient(rc, h, g.gv, g.path); err != nil {
			return nil, fmt.Errorf("API client for %s: %w", g.gv, err)
		}
	}
	return &c, nil
}

func restClient(rc *rest.Config, h *http.Client, gv schema.GroupVersion, path string) (rest.Interface, error) {
	c := rest.CopyConfig(rc)
	c.GroupVersion, c.APIPath = &gv, path
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, codecs).WithoutConversion()
	return rest.RESTClientForConfigAndClient(c, h)
}

// typed is gentype's client for one kind (T = *X, L = *XL), preferring
// protobuf as client-go's generated clients for built-in kinds do.
func typed[X, XL any, T interface {
	*X
	runtime.Object
	metav1.Object
}, L interface {
	*XL
	runtime.Object
}](rc rest.Interface, resource, namespace string) *gentype.ClientWithList[T, L] {
	return gentype.NewClientWithList(resource, rc, parameterCodec, namespace,
		func() T { return new(X) }, func() L { return new(XL) }, gentype.PrefersProtobuf[T]())
}

func (c *client) Pods(namespace string) PodClient {
	return pods{typed[corev1.Pod, corev1.PodList](c.core, "pods", namespace)}
}

func (c *client) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return typed[corev1.Node, corev1.NodeList](c.core, "nodes", "")
}

func (c *client) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return typed[corev1.Namespace, corev1.NamespaceList](c.core, "namespaces", "")
}

func (c *client) ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return typed[corev1.ConfigMap, corev1.ConfigMapList](c.core, "configmaps", namespace)
}

func (c *client) ServiceAccounts(namespace string) ServiceAccountClient {
	return serviceAccounts{typed[corev1.ServiceAccount, corev1.ServiceAccountList](c.core, "serviceaccounts", namespace)}
}

func (c *client) Events(namespace string) Resource[*corev1.Event, *corev1.EventList] {
	return typed[corev1.Event, corev1.EventList](c.core, "events", namespace)
}

func (c *client) DaemonSets(namespace string) Resource[*appsv1.DaemonSet, *appsv1.DaemonSetList] {
	return typed[appsv1.DaemonSet, appsv1.DaemonSetList](c.apps, "daemonsets", namespace)
}

func (c *client) Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return typed[coordinationv1.Lease, coordinationv1.LeaseList](c.coordination, "leases", namespace)
}

func (c *client) MutatingWebhookConfigurations() Resource[*admissionv1.MutatingWebhookConfiguration, *admissionv1.MutatingWebhookConfigurationList] {
	return typed[admissionv1.MutatingWebhookConfiguration, admissionv1.MutatingWebhookConfigurationList](c.admission, "mutatingwebhookconfigurations", "")
}

// pods adds the eviction subresource, as client-go's pods client has it.
type pods struct {
	*gentype.ClientWithList[*corev1.Pod, *corev1.PodList]
}

func (p pods) EvictV1(ctx context.Context, eviction *policyv1.Eviction) error {
	return p.GetClient().Post().Namespace(p.GetNamespace()).Resource("pods").Name(eviction.Name).
		SubResource("eviction").Body(eviction).Do(ctx).Error()
}

// serviceAccounts adds the token subresource (TokenRequest).
type serviceAccounts struct {
	*gentype.ClientWithList[*corev1.ServiceAccount, *corev1.ServiceAccountList]
}

func (s serviceAccounts) CreateToken(ctx context.Context, name string, req *authenticationv1.TokenRequest,
	opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	err := s.GetClient().Post().UseProtobufAsDefault().Namespace(s.GetNamespace()).Resource("serviceaccounts").Name(name).
		SubResource("token").VersionedParams(&opts, parameterCodec).Body(req).Do(ctx).Into(out)
	return out, err
}
