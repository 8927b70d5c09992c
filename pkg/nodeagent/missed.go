package nodeagent

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/pkg/nodeagent/podcache"
)

// ownerBackoff: after one of a controller's pods is restarted, its others
// are only reported this long (the replacement missing its sidecar too
// means the injector is still away).
const ownerBackoff = 10 * time.Minute

// namespaceLabels is an informer over every namespace, keeping only their
// labels: which ones select sidecar injection.
type namespaceLabels struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
}

func newNamespaceLabels(cs kubernetes.Interface) (*namespaceLabels, error) {
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Namespaces().Informer()
	if err := inf.SetTransform(func(obj any) (any, error) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			ns.ManagedFields, ns.Annotations = nil, nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	return &namespaceLabels{informer: inf, factory: factory}, nil
}

// Start runs the informer until ctx ends and waits for its first list.
func (n *namespaceLabels) Start(ctx context.Context) bool {
	n.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), n.informer.HasSynced)
}

// Get returns a namespace's labels, false when it is not known.
func (n *namespaceLabels) Get(name string) (map[string]string, bool) {
	obj, ok, err := n.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, false
	}
	return ns.Labels, true
}

// newMissed wires the missed-injection detector: the node's pods, every
// namespace's labels (a change to them wakes it), Events, the gauge and
// the restart counter, and pod deletion with a UID precondition.
func newMissed(cfg Config, cs kubernetes.Interface, pods *podcache.Pods, rec record.EventRecorder, reg prometheus.Registerer,
	log *slog.Logger) (*missed.Detector, *namespaceLabels, error) {
	namespaces, err := newNamespaceLabels(cs)
	if err != nil {
		return nil, nil, err
	}
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "istio_cni_missed_injection_pods",
		Help: "Running pods on this node that Istio's injector should have given a sidecar but did not.",
	})
	restarts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "istio_cni_missed_injection_restarts_total",
		Help: "Pods that missed their sidecar injection deleted so that their controller recreates them, by result.",
	}, []string{"result"})
	reg.MustRegister(gauge, restarts)
	d := missed.New(missed.Config{
		Mode: cfg.MissedInjection, RestartsPerMinute: cfg.MissedRestartsPerMinute, OwnerBackoff: ownerBackoff,
		Excluded: append([]string{cfg.Install.PodNamespace}, cfg.Install.ExcludeNamespaces...),
	}, missed.Deps{
		Pods:            pods,
		NamespaceLabels: namespaces.Get,
		Delete:          audit.APIActions{Client: cs}.Delete,
		Events:          rec,
		Missed:          gauge,
		Restarts:        func(result string) { restarts.WithLabelValues(result).Inc() },
		Log:             log,
	})
	if _, err := namespaces.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.Wake() },
		UpdateFunc: func(any, any) { d.Wake() },
	}); err != nil {
		return nil, nil, err
	}
	return d, namespaces, nil
}
