package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"istio-cni.local/istio-cni/pkg/nodeagent/injection"
	"istio-cni.local/istio-cni/pkg/nodeagent/kubeclient"
)

// injectorReader keeps a view of the cluster's sidecar injectors for the
// missed-injection detector: their MutatingWebhookConfigurations (an
// informer) and each revision's istio-sidecar-injector ConfigMap (read
// when needed, at most once a configTTL). What it cannot read it says,
// once, and stands in for with the istio-discovery chart's defaults.
type injectorReader struct {
	cs             kubeclient.Interface
	istioNamespace string // where a URL webhook's ConfigMap lives
	log            *slog.Logger
	now            func() time.Time
	listRetry      time.Duration // how often the webhooks are asked for while they cannot be listed

	informer cache.SharedIndexInformer

	mu sync.Mutex
	// fallback: why the chart's view stands in (the webhooks cannot be
	// listed); "" while the informer serves.
	fallback string
	configs  map[string]cachedConfig // by namespace/name
	said     map[string]bool         // what was logged once
}

type cachedConfig struct {
	config injection.Config
	from   string
	at     time.Time
}

// configTTL is how long a revision's configuration read is reused.
const configTTL = time.Minute

func newInjectorReader(cs kubeclient.Interface, istioNamespace string, log *slog.Logger) *injectorReader {
	inf := cache.NewSharedIndexInformer(kubeclient.ListWatch(cs, cs.MutatingWebhookConfigurations(), nil),
		&admissionv1.MutatingWebhookConfiguration{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(obj any) (any, error) {
		if c, ok := obj.(*admissionv1.MutatingWebhookConfiguration); ok {
			c.ManagedFields, c.Annotations = nil, nil
			for i := range c.Webhooks {
				c.Webhooks[i].ClientConfig.CABundle = nil
			}
		}
		return obj, nil
	})
	return &injectorReader{cs: cs, istioNamespace: istioNamespace, log: log, now: time.Now, listRetry: time.Minute, informer: inf,
		configs: map[string]cachedConfig{}, said: map[string]bool{}}
}

// Start asks whether the webhooks can be listed; if so it runs the
// informer until ctx ends and waits for its first list. If not (the RBAC
// not there yet, in an upgrade), it judges by the chart's view meanwhile
// and asks again every r.listRetry. It returns false only when ctx ended
// first.
func (r *injectorReader) Start(ctx context.Context) bool {
	if err := r.canList(ctx); err != nil {
		if ctx.Err() != nil {
			return false
		}
		r.setFallback("the MutatingWebhookConfigurations cannot be listed (" + err.Error() + ")")
		r.log.Warn("missed injection: judging by the istio-discovery chart's webhooks and defaults until they can be listed", "why", err.Error())
		go r.retryList(ctx)
		return true
	}
	go r.informer.RunWithContext(ctx)
	return cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced)
}

func (r *injectorReader) canList(ctx context.Context) error {
	_, err := r.cs.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{Limit: 1})
	return err
}

// retryList asks again until the webhooks can be listed, then runs the
// informer and leaves the chart's view once it has synced.
func (r *injectorReader) retryList(ctx context.Context) {
	t := time.NewTicker(r.listRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if r.canList(ctx) != nil {
			continue
		}
		go r.informer.RunWithContext(ctx)
		if cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced) {
			r.setFallback("")
			r.log.Info("missed injection: the webhook configurations can be listed now; following them")
		}
		return
	}
}

func (r *injectorReader) setFallback(why string) {
	r.mu.Lock()
	r.fallback = why
	r.mu.Unlock()
}

// OnChange calls f when a webhook configuration changes.
func (r *injectorReader) OnChange(f func()) error {
	_, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f() },
		UpdateFunc: func(any, any) { f() },
		DeleteFunc: func(any) { f() },
	})
	return err
}

// View is the injectors as last seen.
func (r *injectorReader) View(ctx context.Context) injection.View {
	r.mu.Lock()
	fallback := r.fallback
	r.mu.Unlock()
	if fallback != "" {
		return injection.ChartView(fallback)
	}
	var mwcs []*admissionv1.MutatingWebhookConfiguration
	for _, o := range r.informer.GetStore().List() {
		if c, ok := o.(*admissionv1.MutatingWebhookConfiguration); ok {
			mwcs = append(mwcs, c)
		}
	}
	return injectorsOf(mwcs, func(rev, ns string) (injection.Config, string) { return r.config(ctx, rev, ns) }, r.istioNamespace)
}

// injectorsOf builds the view from the webhook configurations: each one
// with webhooks of Istio's injector is a revision (its istio.io/rev label,
// "default" without one), with the configuration config reads.
func injectorsOf(mwcs []*admissionv1.MutatingWebhookConfiguration, config func(rev, ns string) (injection.Config, string), istioNamespace string) injection.View {
	view := injection.View{From: "the cluster's MutatingWebhookConfigurations"}
	for _, c := range mwcs {
		inj := injection.Injector{Revision: c.Labels[injection.RevisionLabel]}
		if inj.Revision == "" {
			inj.Revision = "default"
		}
		ns := istioNamespace
		for _, wh := range c.Webhooks {
			if !strings.HasSuffix(wh.Name, injection.WebhookSuffix) {
				continue
			}
			inj.Webhooks = append(inj.Webhooks, injection.Webhook{Name: wh.Name, NamespaceSelector: wh.NamespaceSelector, ObjectSelector: wh.ObjectSelector})
			if s := wh.ClientConfig.Service; s != nil && s.Namespace != "" {
				ns = s.Namespace
			}
		}
		if len(inj.Webhooks) == 0 {
			continue
		}
		inj.Config, inj.ConfigFrom = config(inj.Revision, ns)
		view.Injectors = append(view.Injectors, inj)
	}
	return view
}

// injectorConfigMap is the name of a revision's injector ConfigMap, as
// the istio-discovery chart names it.
func injectorConfigMap(rev string) string {
	if rev == "" || rev == "default" {
		return "istio-sidecar-injector"
	}
	return "istio-sidecar-injector-" + rev
}

// config reads a revision's injector configuration, at most once a
// configTTL; what cannot be read is the chart's default, said once.
func (r *injectorReader) config(ctx context.Context, rev, ns string) (injection.Config, string) {
	name := injectorConfigMap(rev)
	key := ns + "/" + name
	r.mu.Lock()
	c, ok := r.configs[key]
	r.mu.Unlock()
	if ok && r.now().Sub(c.at) < configTTL {
		return c.config, c.from
	}
	c = cachedConfig{at: r.now()}
	c.config, c.from = readInjectorConfig(ctx, r.cs, ns, name)
	r.mu.Lock()
	r.configs[key] = c
	first := !r.said[c.from]
	r.said[c.from] = true
	r.mu.Unlock()
	if first && c.config.Policy == injection.ChartConfig.Policy && strings.Contains(c.from, "assumed") {
		r.log.Warn("missed injection: an injector's configuration cannot be read", "revision", rev, "configmap", key, "why", c.from)
	}
	return c.config, c.from
}

// readInjectorConfig reads the "config" key of an injector ConfigMap.
func readInjectorConfig(ctx context.Context, cs kubeclient.Interface, ns, name string) (injection.Config, string) {
	assumed := func(why string) (injection.Config, string) {
		return injection.ChartConfig, fmt.Sprintf("ConfigMap %s/%s %s: the chart's default (policy enabled, no selectors) assumed", ns, name, why)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cm, err := cs.ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return assumed("does not exist")
	case apierrors.IsForbidden(err):
		return assumed("cannot be read (forbidden: the chart's missedInjection.revisions names the revisions it may read)")
	case err != nil:
		return assumed("cannot be read (" + err.Error() + ")")
	}
	var c injection.Config
	if cm.Data["config"] == "" {
		return assumed("has no config")
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config"]), &c); err != nil {
		return assumed("holds no valid config (" + err.Error() + ")")
	}
	return c, fmt.Sprintf("ConfigMap %s/%s", ns, name)
}

// readInjectors reads the injectors once, for inspect: the webhook
// configurations and each revision's configuration, or the chart's where
// they cannot be read.
func readInjectors(ctx context.Context, cs kubeclient.Interface, istioNamespace string) injection.View {
	list, err := cs.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return injection.ChartView("the MutatingWebhookConfigurations cannot be listed (" + err.Error() + ")")
	}
	mwcs := make([]*admissionv1.MutatingWebhookConfiguration, len(list.Items))
	for i := range list.Items {
		mwcs[i] = &list.Items[i]
	}
	return injectorsOf(mwcs, func(rev, ns string) (injection.Config, string) {
		return readInjectorConfig(ctx, cs, ns, injectorConfigMap(rev))
	}, istioNamespace)
}
