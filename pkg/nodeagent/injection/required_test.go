package injection

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cases of upstream's TestInjectRequired (pkg/kube/inject/webhook_test.go
// at the pinned istio.io/istio), each with upstream's answer.
func TestRequiredAsUpstream(t *testing.T) {
	sel := func(kv ...string) []metav1.LabelSelector {
		if len(kv) == 1 { // a key alone: the label exists, any value
			return []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: kv[0], Operator: metav1.LabelSelectorOpExists}}}}
		}
		return []metav1.LabelSelector{{MatchLabels: map[string]string{kv[0]: kv[1]}}}
	}
	enabled, disabled := Config{Policy: PolicyEnabled}, Config{Policy: PolicyDisabled}
	with := func(c Config, never, always []metav1.LabelSelector) Config {
		c.NeverInjectSelector, c.AlwaysInjectSelector = never, always
		return c
	}
	ann := func(v string) map[string]string { return map[string]string{InjectAnnotation: v} }
	for _, tc := range []struct {
		name        string
		config      Config
		hostNetwork bool
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"no-policy", enabled, false, nil, map[string]string{}, true},
		{"default-policy", enabled, false, nil, nil, true},
		{"force-on-policy", enabled, false, nil, ann("true"), true},
		{"force-off-policy", enabled, false, nil, ann("false"), false},
		{"disabled no-policy", disabled, false, nil, map[string]string{}, false},
		{"disabled default-policy", disabled, false, nil, nil, false},
		{"disabled force-on-policy", disabled, false, nil, ann("true"), true},
		{"disabled force-off-policy", disabled, false, nil, ann("false"), false},
		{"invalid-inject-value-yes", enabled, false, nil, ann("yes"), true},
		{"invalid-inject-value-on", disabled, false, nil, ann("on"), false},
		{"invalid-inject-value-random", enabled, false, map[string]string{InjectLabel: "random"}, nil, true},
		{"host network", enabled, true, nil, map[string]string{}, false},
		{"wrong-policy", Config{Policy: "wrong_policy"}, false, nil, map[string]string{}, false},
		{"policy-enabled-always-inject-no-labels", with(enabled, nil, sel("foo", "bar")), false, nil, nil, true},
		{"policy-enabled-always-inject-with-labels", with(enabled, nil, sel("foo", "bar")), false, map[string]string{"foo": "bar1"}, nil, true},
		{"policy-disabled-always-inject-no-labels", with(disabled, nil, sel("foo", "bar")), false, nil, nil, false},
		{"policy-disabled-always-inject-with-labels", with(disabled, nil, sel("foo", "bar")), false, map[string]string{"foo": "bar"}, nil, true},
		{"policy-enabled-never-inject-no-labels", with(enabled, sel("foo", "bar"), nil), false, nil, nil, true},
		{"policy-enabled-never-inject-with-labels", with(enabled, sel("foo", "bar"), nil), false, map[string]string{"foo": "bar"}, nil, false},
		{"policy-disabled-never-inject-no-labels", with(disabled, sel("foo", "bar"), nil), false, nil, nil, false},
		{"policy-disabled-never-inject-with-labels", with(disabled, sel("foo", "bar"), nil), false, map[string]string{"foo": "bar"}, nil, false},
		{"policy-enabled-never-inject-with-empty-label", with(enabled, sel("foo"), nil), false, map[string]string{"foo": "", "foo2": "bar2"}, nil, false},
		{"policy-disabled-always-inject-with-empty-label", with(disabled, nil, sel("foo")), false, map[string]string{"foo": "", "foo2": "bar2"}, nil, true},
		{"policy-disabled-always-never-inject-with-label-returns-true", with(disabled, sel("never"), sel("always")), false, map[string]string{"always": "bar", "foo2": "bar2"}, nil, true},
		{"policy-disabled-always-never-inject-with-label-returns-false", with(disabled, sel("never"), sel("always")), false, map[string]string{"never": "bar", "foo2": "bar2"}, nil, false},
		{"policy-disabled-always-never-inject-with-both-labels", with(disabled, sel("never"), sel("always")), false, map[string]string{"always": "bar", "never": "bar2"}, nil, false},
		{"policy-enabled-annotation-true-never-inject", with(enabled, sel("foo"), nil), false, map[string]string{"foo": "", "foo2": "bar2"}, ann("true"), true},
		{"policy-enabled-annotation-false-always-inject", with(enabled, nil, sel("foo")), false, map[string]string{"foo": "", "foo2": "bar2"}, ann("false"), false},
		{"policy-disabled-annotation-false-always-inject", with(disabled, nil, sel("foo")), false, map[string]string{"foo": "", "foo2": "bar2"}, ann("false"), false},
		{"policy-enabled-never-inject-multiple-labels", with(enabled, append(sel("foo"), sel("bar")...), nil), false, map[string]string{"label1": "", "bar": "anything"}, nil, false},
		{"policy-enabled-always-inject-multiple-labels", with(disabled, nil, append(sel("foo"), sel("bar")...)), false, map[string]string{"label1": "", "bar": "anything"}, nil, true},
		{"policy-disabled-annotation-true-never-inject", with(disabled, sel("foo"), nil), false, map[string]string{"foo": "", "foo2": "bar2"}, ann("true"), true},
		{"policy-disabled-label-enabled", disabled, false, map[string]string{InjectLabel: "true"}, nil, true},
		{"policy-disabled-both-enabled", disabled, false, map[string]string{InjectLabel: "true"}, ann("true"), true},
		{"policy-disabled-label-enabled-annotation-disabled", disabled, false, map[string]string{InjectLabel: "true"}, ann("false"), true},
		{"policy-disabled-label-disabled-annotation-enabled", disabled, false, map[string]string{InjectLabel: "false"}, ann("true"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Required(tc.config, "test-namespace", tc.hostNetwork, tc.labels, tc.annotations)
			if got != tc.want || why == "" {
				t.Errorf("Required = %v (%q), want %v", got, why, tc.want)
			}
		})
	}
}
