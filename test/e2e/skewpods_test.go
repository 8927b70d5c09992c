package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/test/cluster"
)

// skewVariant is a kind of meshed pod whose rules differ from a default
// sidecar's, each by a setting a record of its ADD must carry across
// builds: the proxy's env (INVALID_DROP, DNS capture, dual stack) or the
// interception mode.
type skewVariant struct {
	name        string
	env         map[string]string // istio-proxy's
	annotations map[string]string
	meshed      bool
}

func skewVariants() []skewVariant {
	tproxy := map[string]string{"sidecar.istio.io/interceptionMode": "TPROXY"}
	return []skewVariant{
		{name: "invalid-drop", meshed: true, env: map[string]string{"INVALID_DROP": "true"}},
		{name: "tproxy", meshed: true, annotations: tproxy},
		{name: "dns", meshed: true, env: map[string]string{"ISTIO_META_DNS_CAPTURE": "true"}},
		{name: "dual", meshed: true, env: map[string]string{"ISTIO_DUAL_STACK": "true"}},
		{name: "all", meshed: true, annotations: tproxy,
			env: map[string]string{"INVALID_DROP": "true", "ISTIO_META_DNS_CAPTURE": "true", "ISTIO_DUAL_STACK": "true"}},
	}
}

// podJSON renders the variant as the pod name: a test pod (an app
// dialling target, with istio-proxy if meshed) plus the variant's
// annotations and proxy env.
func (v skewVariant) podJSON(target, name string) []byte {
	var pod map[string]any
	base := cluster.PodSpec{Namespace: "default", Name: name, Target: target, Sidecar: v.meshed}
	_ = json.Unmarshal(base.JSON(), &pod) // our own rendering
	meta := pod["metadata"].(map[string]any)
	if len(v.annotations) > 0 {
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
		}
		for k, val := range v.annotations {
			ann[k] = val
		}
		meta["annotations"] = ann
	}
	for _, c := range pod["spec"].(map[string]any)["containers"].([]any) {
		ctr := c.(map[string]any)
		if ctr["name"] != "istio-proxy" {
			continue
		}
		var env []map[string]string
		for _, k := range slices.Sorted(maps.Keys(v.env)) {
			env = append(env, map[string]string{"name": k, "value": v.env[k]})
		}
		ctr["env"] = env
	}
	b, _ := json.Marshal(pod) // maps and strings
	return b
}

// model is what the plugin's own decision and rule model say the pod
// rendered by podJSON must hold; nil rulesets for an unmeshed pod.
func (v skewVariant) model(target, name string) (iptables.Model, error) {
	var pod kube.Pod
	if err := json.Unmarshal(v.podJSON(target, name), &pod); err != nil {
		return iptables.Model{}, err
	}
	d, err := decision.Pod(&pod)
	if err != nil {
		return iptables.Model{}, fmt.Errorf("%s: the decision refuses the test's pod: %w", name, err)
	}
	if d.Redirect != v.meshed {
		return iptables.Model{}, fmt.Errorf("%s: decision %+v, want redirect=%v", name, d, v.meshed)
	}
	if !d.Redirect {
		return iptables.Model{}, nil
	}
	// The node's pods have IPv4 only: IPv6 rules come with dual stack.
	return decision.Rules(d, decision.DefaultNodeSettings(), true, d.DualStack), nil
}

// netState is what of a pod's network namespace istio-cni writes: the
// rules of both families (iptables-save, ip6tables-save) and the policy
// routing TPROXY needs (both families' ip rules and the routes of the
// plugin's table), read in one nsenter.
type netState struct {
	v4, v6, routing string
}

var (
	saveCounters = regexp.MustCompile(`\[\d+:\d+\]`)
	saveComment  = regexp.MustCompile(`(?m)^#.*\n`)
)

// readNetState reads netns's state. Only what changes with no rule
// changing is left out: iptables-save's comment lines (its version and
// the time) and the built-in chains' packet counters.
func readNetState(ctx context.Context, netns string) (netState, error) {
	const sep = "\n=== istio-cni e2e ===\n"
	script := fmt.Sprintf(`iptables-save && printf '%[1]s' && ip6tables-save && printf '%[1]s' &&
ip -4 rule show && ip -6 rule show && for f in 4 6; do
  ip -$f route show table %[2]d 2>/dev/null || echo "no ipv$f table %[2]d"; done`,
		strings.ReplaceAll(sep, "\n", `\n`), iptables.DefaultTProxyTable)
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+netns, "sh", "-c", script).CombinedOutput() // #nosec G204 -- test harness
	if err != nil {
		return netState{}, fmt.Errorf("nsenter --net=%s: %w: %s", netns, err, out)
	}
	parts := strings.Split(string(out), sep)
	if len(parts) != 3 {
		return netState{}, fmt.Errorf("nsenter --net=%s: %d parts, want 3:\n%s", netns, len(parts), out)
	}
	norm := func(s string) string {
		return saveCounters.ReplaceAllString(saveComment.ReplaceAllString(s, ""), "[0:0]")
	}
	return netState{v4: norm(parts[0]), v6: norm(parts[1]), routing: parts[2]}, nil
}

// diff says how two states differ, line by line, or "" if they do not.
func (s netState) diff(now netState) string {
	var b strings.Builder
	for _, p := range []struct{ name, was, is string }{{"ipv4", s.v4, now.v4}, {"ipv6", s.v6, now.v6}, {"routing", s.routing, now.routing}} {
		if p.was == p.is {
			continue
		}
		was, is := strings.Split(p.was, "\n"), strings.Split(p.is, "\n")
		for _, l := range was {
			if !slices.Contains(is, l) {
				fmt.Fprintf(&b, "%s: - %s\n", p.name, l)
			}
		}
		for _, l := range is {
			if !slices.Contains(was, l) {
				fmt.Fprintf(&b, "%s: + %s\n", p.name, l)
			}
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "%s: the same lines in another order:\n%s", p.name, p.is)
		}
	}
	return b.String()
}

// matchesModel: the state holds exactly the model's rules, each family
// (a family the model leaves alone holds no chain of ours).
func (s netState) matchesModel(m iptables.Model) error {
	var errs []error
	for _, f := range []struct {
		name string
		save string
		rs   *iptables.Ruleset
	}{{"ipv4", s.v4, m.V4}, {"ipv6", s.v6, m.V6}} {
		observed, err := iptables.ParseSave([]byte(f.save))
		if err != nil {
			return err
		}
		if f.rs == nil {
			if strings.Contains(f.save, iptables.ChainPrefix) {
				errs = append(errs, fmt.Errorf("%s: chains of ours where the model has none:\n%s", f.name, f.save))
			}
			continue
		}
		if d := iptables.Diff(f.rs, observed); len(d) > 0 {
			errs = append(errs, fmt.Errorf("%s: rules differ from the model: %v\n%s", f.name, d, f.save))
		}
	}
	return errors.Join(errs...)
}
