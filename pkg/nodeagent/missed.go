package nodeagent

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
	"istio-cni.local/istio-cni/pkg/nodeagent/missed"
	"istio-cni.local/istio-cni/pkg/nodeagent/podcache"
)

// namespaceLabels is an informer over every namespace, keeping only their
// labels: which ones select sidecar injection.
type namespaceLabels struct {
	informer cache.SharedIndexInformer
}

func newNamespaceLabels(cs kubeclient.Interface) (*namespaceLabels, error) {
	inf := cache.NewSharedIndexInformer(kubeclient.ListWatch(cs, cs.Namespaces(), nil), &corev1.Namespace{}, 0, cache.Indexers{})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			ns.ManagedFields, ns.Annotations = nil, nil
		}
		return obj, nil
	}); err != nil {
		return nil, err
	}
	return &namespaceLabels{informer: inf}, nil
}

// Start runs the informer until ctx ends and waits for its first list.
func (n *namespaceLabels) Start(ctx context.Context) bool {
	go n.informer.RunWithContext(ctx)
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
// namespace's labels and the cluster's injectors (a change to either wakes
// it), Events, the gauge and the restart counter, and restart mode's
// shared state in the API.
func newMissed(cfg Config, cs kubeclient.Interface, pods *podcache.Pods, rec record.EventRecorder, reg prometheus.Registerer,
	log *slog.Logger) (*missed.Detector, *missedSources, error) {
	namespaces, err := newNamespaceLabels(cs)
	if err != nil {
		return nil, nil, err
	}
	injectors := newInjectorReader(cs, cfg.IstioNamespace, log)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "istio_cni_missed_injection_pods",
		Help: "Running pods on this node that Istio's injector should have given a sidecar but did not.",
	})
	restarts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "istio_cni_missed_injection_restarts_total",
		Help: "Evictions of pods that missed their sidecar injection, so that their controller recreates them, by result: evicted, disruption_budget (refused by a PodDisruptionBudget, retried), budget (the cluster's per-minute budget spent), error.",
	}, []string{"result"})
	reg.MustRegister(gauge, restarts)
	d := missed.New(missed.Config{
		Mode:     cfg.MissedInjection,
		Excluded: append([]string{cfg.Install.PodNamespace}, cfg.Install.ExcludeNamespaces...),
	}, missed.Deps{
		Pods:            pods,
		NamespaceLabels: namespaces.Get,
		Injectors:       injectors.View,
		Restarts:        apiRestarts{cs: cs, namespace: cfg.Install.PodNamespace, perMinute: cfg.MissedRestartsPerMinute, now: time.Now},
		Events:          rec,
		Missed:          gauge,
		Counted:         func(result string) { restarts.WithLabelValues(result).Inc() },
		Log:             log,
	})
	if _, err := namespaces.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.Wake() },
		UpdateFunc: func(any, any) { d.Wake() },
	}); err != nil {
		return nil, nil, err
	}
	if err := injectors.OnChange(d.Wake); err != nil {
		return nil, nil, err
	}
	return d, &missedSources{namespaces: namespaces, injectors: injectors}, nil
}

// missedSources are what the detector reads besides the node's pods.
type missedSources struct {
	namespaces *namespaceLabels
	injectors  *injectorReader
}

// Start runs both until ctx ends and waits for their first lists.
func (m *missedSources) Start(ctx context.Context) bool {
	return m.namespaces.Start(ctx) && m.injectors.Start(ctx)
}
