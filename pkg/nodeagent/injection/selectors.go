package injection

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// WebhookSuffix ends the name of every webhook of Istio's sidecar
// injector (rev.namespace.sidecar-injector.istio.io, ...).
const WebhookSuffix = "sidecar-injector.istio.io"

// Webhook is one webhook of an injector's MutatingWebhookConfiguration:
// the API server calls the injector for a pod when both selectors match
// (a nil selector matches everything, as in the API).
type Webhook struct {
	Name              string
	NamespaceSelector *metav1.LabelSelector
	ObjectSelector    *metav1.LabelSelector
}

// Injector is one revision of Istio's injector: its webhooks and its
// configuration.
type Injector struct {
	Revision string
	Webhooks []Webhook
	Config   Config
	// ConfigFrom says where Config was read, or why the chart's default
	// is assumed.
	ConfigFrom string
}

// View is what the reader knows of the cluster's injectors.
type View struct {
	Injectors []Injector
	// From says where the view comes from, for messages.
	From string
}

// selects returns the name of the first of the injector's webhooks the
// API server would call for a pod with these labels in a namespace with
// these labels.
func (inj Injector) selects(nsLabels, podLabels map[string]string) (string, bool) {
	for _, wh := range inj.Webhooks {
		if matches(wh.NamespaceSelector, nsLabels) && matches(wh.ObjectSelector, podLabels) {
			return wh.Name, true
		}
	}
	return "", false
}

// matches as the API server applies a webhook's selector; an invalid one
// matches nothing (the API server refuses it anyway).
func matches(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(set))
}

// ChartView stands in for a cluster whose injector webhooks cannot be
// read: the istio-discovery chart's four webhooks for the default
// revision, with the revision webhooks taking any istio.io/rev value (a
// revision's own webhooks select it by value), and the chart's default
// configuration.
func ChartView(why string) View {
	req := func(key string, op metav1.LabelSelectorOperator, values ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	sel := func(r ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: r}
	}
	notFalse := req(InjectLabel, metav1.LabelSelectorOpNotIn, "false")
	return View{From: "the istio-discovery chart's webhooks and defaults: " + why, Injectors: []Injector{{
		Revision: "any",
		Webhooks: []Webhook{
			{"rev.namespace." + WebhookSuffix, sel(req(RevisionLabel, metav1.LabelSelectorOpExists), req(NamespaceLabel, metav1.LabelSelectorOpDoesNotExist)), sel(notFalse)},
			{"rev.object." + WebhookSuffix, sel(req(RevisionLabel, metav1.LabelSelectorOpDoesNotExist), req(NamespaceLabel, metav1.LabelSelectorOpDoesNotExist)),
				sel(notFalse, req(RevisionLabel, metav1.LabelSelectorOpExists))},
			{"namespace." + WebhookSuffix, sel(req(NamespaceLabel, metav1.LabelSelectorOpIn, "enabled")), sel(notFalse)},
			{"object." + WebhookSuffix, sel(req(NamespaceLabel, metav1.LabelSelectorOpDoesNotExist), req(RevisionLabel, metav1.LabelSelectorOpDoesNotExist)),
				sel(req(InjectLabel, metav1.LabelSelectorOpIn, "true"), req(RevisionLabel, metav1.LabelSelectorOpDoesNotExist))},
		},
		Config:     ChartConfig,
		ConfigFrom: "the chart's default (policy enabled, no selectors)",
	}}}
}
