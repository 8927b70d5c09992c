package injection

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Policy is an injector's autoInject policy (its ConfigMap's "policy").
type Policy string

const (
	PolicyEnabled  Policy = "enabled"
	PolicyDisabled Policy = "disabled"
)

// Config is the part of an injector's configuration (the "config" key of
// its istio-sidecar-injector ConfigMap) that decides whether a pod the
// webhook was called for is injected.
type Config struct {
	Policy               Policy                 `json:"policy"`
	NeverInjectSelector  []metav1.LabelSelector `json:"neverInjectSelector"`
	AlwaysInjectSelector []metav1.LabelSelector `json:"alwaysInjectSelector"`
}

// ChartConfig is the istio-discovery chart's default configuration.
var ChartConfig = Config{Policy: PolicyEnabled}

// Required is upstream's injectRequired (pkg/kube/inject/inject.go): once
// the webhook is called for a pod, whether the injector injects it, and
// why. The pod's sidecar.istio.io/inject label wins over the annotation;
// only "true" and "false" mean anything, any other value falls back to
// the selectors and the policy. Then neverInjectSelector, then
// alwaysInjectSelector, then the policy; a policy other than enabled or
// disabled injects nothing.
func Required(c Config, namespace string, hostNetwork bool, podLabels, annotations map[string]string) (bool, string) {
	if hostNetwork {
		return false, "the pod uses the host network"
	}
	if slices.Contains(IgnoredNamespaces, namespace) {
		return false, "namespace " + namespace + " is never injected"
	}
	value, from := annotations[InjectAnnotation], "annotation"
	if l, ok := podLabels[InjectLabel]; ok {
		value, from = l, "label"
	}
	inject, useDefault, why := false, false, ""
	switch value {
	case "true":
		inject, why = true, "the pod's "+from+" "+InjectLabel+"=true"
	case "false":
		inject, why = false, "the pod's "+from+" "+InjectLabel+"=false"
	case "":
		useDefault = true
	default:
		useDefault = true // upstream warns and falls back
	}
	if useDefault {
		if matchesAny(c.NeverInjectSelector, podLabels) {
			inject, useDefault, why = false, false, "the pod's labels match the injector's neverInjectSelector"
		}
	}
	if useDefault {
		if matchesAny(c.AlwaysInjectSelector, podLabels) {
			inject, useDefault, why = true, false, "the pod's labels match the injector's alwaysInjectSelector"
		}
	}
	if value != "" && value != "true" && value != "false" && useDefault {
		why = "the pod's " + from + " " + InjectLabel + "=" + value + " is neither true nor false, so the policy decides"
	}
	switch c.Policy {
	case PolicyEnabled:
		if useDefault {
			if why == "" {
				why = "the injector's policy is enabled"
			}
			return true, why
		}
		return inject, why
	case PolicyDisabled:
		if useDefault {
			if why == "" {
				why = "the injector's policy is disabled"
			}
			return false, why
		}
		return inject, why
	}
	return false, "the injector's policy " + string(c.Policy) + " is neither enabled nor disabled: it injects nothing"
}

// matchesAny: one of the selectors, valid and not empty, matches.
func matchesAny(selectors []metav1.LabelSelector, podLabels map[string]string) bool {
	for i := range selectors {
		s, err := metav1.LabelSelectorAsSelector(&selectors[i])
		if err == nil && !s.Empty() && s.Matches(labels.Set(podLabels)) {
			return true
		}
	}
	return false
}
