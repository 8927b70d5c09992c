package kubeclient

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Scheme holds the agent's kinds: those it reads and writes, and the
// bodies of the subresources it posts (Eviction, TokenRequest). Events
// refer to objects through it.
var Scheme = newScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// The options (ListOptions, ...) as query parameters, as client-go's
	// scheme registers them.
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	b := runtime.NewSchemeBuilder(corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme,
		admissionv1.AddToScheme, policyv1.AddToScheme, authenticationv1.AddToScheme)
	utilruntime.Must(b.AddToScheme(s))
	return s
}
