package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=c1;OTHER=x"

func conf(version, prev string) string {
	c := fmt.Sprintf(`{"cniVersion":%q,"name":"k8s","type":"istio-cni","exclude_namespaces":["kube-system"],"agent_namespace":"istio-cni"`, version)
	if prev != "" {
		c += `,"prevResult":` + prev
	}
	return c + "}"
}

const prevV4 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0}]}`
const prevDual = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.1.0.5/24","interface":0},{"address":"fd00::5/64","interface":0}]}`

func meshedPod(ann map[string]string) *kube.Pod {
	a := map[string]string{decision.StatusAnnotation: "{}"}
	for k, v := range ann {
		a[k] = v
	}
	return &kube.Pod{
		Metadata: kube.ObjectMeta{Name: "web-1", Namespace: "team-a", Annotations: a},
		Spec:     kube.PodSpec{Containers: []kube.Container{{Name: "app"}, {Name: "istio-proxy"}}},
	}
}

func TestAddRedirectsMeshedPod(t *testing.T) {
	for _, tc := range []struct {
		prev     string
		hasIPv6  bool
		wantV6   bool
		describe string
	}{
		{prevV4, false, false, "IPv4 prevResult"},
		{prevDual, false, true, "dual-stack prevResult"},
		{"", true, true, "no prevResult, IPv6 in the namespace"},
		{"", false, false, "no prevResult, IPv4 only"},
	} {
		t.Run(tc.describe, func(t *testing.T) {
			h := newHarness()
			h.net.hasIPv6 = tc.hasIPv6
			h.api.pods["team-a/web-1"] = meshedPod(nil)
			if err := h.p.Add(cmdArgs(conf("1.0.0", tc.prev), podArgs)); err != nil {
				t.Fatal(err)
			}
			m, ok := h.net.programmed["/var/run/netns/pod"]
			if !ok || m.V4 == nil || (m.V6 != nil) != tc.wantV6 {
				t.Fatalf("programmed %+v, want v4 and v6=%v", m, tc.wantV6)
			}
			want := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
			if diff := iptables.Diff(&want, observedOf(t, m.V4)); len(diff) != 0 {
				t.Errorf("model differs from the default spec: %v", diff)
			}
			if !strings.Contains(h.stderr.String(), `"reason":"redirect"`) {
				t.Errorf("log line: %s", h.stderr)
			}
		})
	}
}

// observedOf renders a ruleset as iptables-save would print it.
func observedOf(t *testing.T, rs *iptables.Ruleset) *iptables.Observed {
	t.Helper()
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, c := range rs.Chains {
		b.WriteString(":" + c.Name + " - [0:0]\n")
	}
	for _, r := range rs.Rules {
		b.WriteString("-A " + r.Chain + " " + r.Args() + "\n")
	}
	b.WriteString("COMMIT\n")
	obs, err := iptables.ParseSave([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func TestAddPassesThroughWithoutAPICall(t *testing.T) {
	for name, args := range map[string]string{
		"not kubernetes":     "IgnoreUnknown=1",
		"no args":            "",
		"excluded namespace": "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns",
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness()
			h.api.err = errors.New("must not be called")
			if err := h.p.Add(cmdArgs(conf("1.0.0", prevV4), args)); err != nil {
				t.Fatal(err)
			}
			if h.api.calls != 0 || len(h.net.programmed) != 0 {
				t.Errorf("%d API calls, programmed %v", h.api.calls, h.net.programmed)
			}
			assertPassThrough(t, h.stdout.Bytes(), prevV4)
		})
	}
}

func assertPassThrough(t *testing.T, out []byte, prev string) {
	t.Helper()
	var got, want map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	_ = json.Unmarshal([]byte(prev), &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("result %v, want prevResult %v unchanged", got, want)
	}
}

func TestAddEmptyResultOfRequestedVersion(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		h := newHarness()
		if err := h.p.Add(cmdArgs(conf(v, ""), "")); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var res struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(h.stdout.Bytes(), &res); err != nil || res.CNIVersion != v {
			t.Errorf("%s: result %s (%v)", v, h.stdout, err)
		}
	}
}

func TestAddSkipsUnmeshedPod(t *testing.T) {
	h := newHarness()
	pod := meshedPod(nil)
	pod.Spec.Containers = pod.Spec.Containers[:1]
	h.api.pods["team-a/web-1"] = pod
	if err := h.p.Add(cmdArgs(conf("1.0.0", prevV4), podArgs)); err != nil {
		t.Fatal(err)
	}
	if len(h.net.programmed) != 0 {
		t.Error("an unmeshed pod was programmed")
	}
	assertPassThrough(t, h.stdout.Bytes(), prevV4)
}

func TestAddFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *harness)
		code uint
		msg  string
	}{
		{"API down", func(h *harness) {
			h.api.err = &kube.APIError{Kind: kube.Unavailable, Pod: "team-a/web-1", Attempts: 9, Err: errors.New("connection refused")}
		}, types.ErrTryAgainLater, "team-a/web-1"},
		{"pod not found", func(h *harness) {}, ErrPodNotFound, "team-a/web-1"},
		{"forbidden", func(h *harness) {
			h.api.err = &kube.APIError{Kind: kube.Denied, Pod: "team-a/web-1", Err: errors.New("403")}
		}, ErrAPIDenied, "denied"},
		{"bad annotation", func(h *harness) {
			h.api.pods["team-a/web-1"] = meshedPod(map[string]string{decision.ExcludeOutboundPorts: "80 -j ACCEPT"})
		}, ErrPodSettings, decision.ExcludeOutboundPorts},
		{"iptables fails", func(h *harness) {
			h.api.pods["team-a/web-1"] = meshedPod(nil)
			h.net.programErr = errors.New("iptables-restore: exit status 1")
		}, ErrRules, "iptables-restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			tc.set(h)
			err := h.p.Add(cmdArgs(conf("1.0.0", prevV4), podArgs))
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q lacks %q", err, tc.msg)
			}
			if h.stdout.Len() != 0 || (tc.name != "iptables fails" && len(h.net.programmed) != 0) {
				t.Errorf("a failed ADD printed %q / programmed %v", h.stdout, h.net.programmed)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	h := newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Check(cmdArgs(conf("1.0.0", prevV4), podArgs)); err != nil {
		t.Fatalf("CHECK with the rules in place: %v", err)
	}
	h.net.checkDiffs = []string{"nat ISTIO_OUTPUT: missing rule 12"}
	wantCode(t, h.p.Check(cmdArgs(conf("1.0.0", prevV4), podArgs)), ErrRulesMismatch)
	wantCode(t, h.p.Check(cmdArgs(conf("1.0.0", ""), podArgs)), types.ErrInvalidNetworkConfig)
}

// With no record of the sandbox (records go with an uninstall), CHECK
// takes the rules an earlier build wrote for the same settings for the
// pod's: it excluded the status port outbound whatever excludeOutboundPorts
// said. Other rules still fail it.
func TestCheckTakesAnEarlierBuildsRules(t *testing.T) {
	ann := map[string]string{"traffic.sidecar.istio.io/excludeOutboundPorts": "5432"}
	now := iptables.DefaultSpec()
	now.OutboundExclude = []uint16{5432}
	earlier := now
	earlier.OutboundExclude = []uint16{5432, iptables.ProxyStatusPort}
	for _, tc := range []struct {
		name  string
		holds iptables.Spec
		dual  bool
		code  uint
	}{
		{"this build's", now, false, 0},
		{"an earlier build's", earlier, false, 0},
		{"an earlier build's, dual-stack", earlier, true, 0},
		{"neither", iptables.DefaultSpec(), false, ErrRulesMismatch},
	} {
		h := newHarness()
		h.api.pods["team-a/web-1"] = meshedPod(ann)
		m := iptables.Build(tc.holds, true, tc.dual)
		h.net.holds = &m
		prev := prevV4
		if tc.dual {
			prev = prevDual
		}
		err := h.p.Check(cmdArgs(conf("1.0.0", prev), podArgs))
		if tc.code == 0 && err != nil {
			t.Errorf("%s: CHECK = %v, want success", tc.name, err)
		}
		if tc.code != 0 {
			wantCode(t, err, tc.code)
		}
	}
}

// With no record of the sandbox, CHECK takes the rules the other kind of
// writer wrote for the pod's (upstream's istio-cni started it with another
// global.nativeNftables than this node's native_nftables), as the audit
// and inspect do.
func TestCheckWithoutARecordReadsTheOtherKind(t *testing.T) {
	for _, tc := range []struct {
		name             string
		nodeNative, held bool // held: the native writer holds the rules, else iptables
	}{
		{"iptables node, native rules", false, true},
		{"native node, iptables rules", true, false},
		{"native node, native rules", true, true},
	} {
		h := newHarness()
		h.api.pods["team-a/web-1"] = meshedPod(nil)
		var asked []applied.Writer
		h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork {
			asked = append(asked, w)
			if w.Native == tc.held {
				return h.net
			}
			return &fakeNet{checkDiffs: []string{"nat ISTIO_OUTPUT: chain missing"}}
		}
		c := conf("1.0.0", prevV4)
		if tc.nodeNative {
			c = strings.Replace(c, `"agent_namespace"`, `"native_nftables":true,"agent_namespace"`, 1)
		}
		if err := h.p.Check(cmdArgs(c, podArgs)); err != nil {
			t.Errorf("%s: CHECK = %v (read with %+v), want success", tc.name, err, asked)
		}
	}
	// Neither holds them: the node's writer's differences, and why the
	// other kind's were not read where that failed.
	for _, otherErr := range []error{nil, errors.New("netlink receive: interrupted system call")} {
		h := newHarness()
		h.api.pods["team-a/web-1"] = meshedPod(nil)
		h.net.checkDiffs = []string{"nat ISTIO_OUTPUT: chain missing"}
		h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork {
			if w.Native {
				return &fakeNet{checkDiffs: h.net.checkDiffs, checkErr: otherErr}
			}
			return h.net
		}
		err := h.p.Check(cmdArgs(conf("1.0.0", prevV4), podArgs))
		wantCode(t, err, ErrRulesMismatch)
		unread := strings.Contains(err.Error(), "(reading them as native nftables failed: netlink receive: interrupted system call)")
		if !strings.Contains(err.Error(), "ISTIO_OUTPUT: chain missing") || unread != (otherErr != nil) {
			t.Errorf("the other kind's read failing: %v; CHECK = %v", otherErr, err)
		}
	}
}

func TestDelAlwaysSucceeds(t *testing.T) {
	h := newHarness()
	h.api.err = errors.New("DEL must not call the API")
	for _, c := range []string{conf("1.0.0", prevV4), `{"cniVersion":"1.0.0","log_level":"loud"}`} {
		if err := h.p.Del(cmdArgs(c, podArgs)); err != nil {
			t.Errorf("DEL: %v", err)
		}
	}
	if h.api.calls != 0 || len(h.net.cleaned) != 2 {
		t.Errorf("%d API calls, cleaned %v", h.api.calls, h.net.cleaned)
	}
}

// TestStatusNeedsOnlyWhatPlainPodsNeed: containerd turns a STATUS error
// into NetworkReady=false and kubelet into a NotReady node, which starts
// no pod at all. So STATUS fails only for what would fail a plain pod's ADD
// too (a config that does not parse), never for what only injected pods
// need: the kubeconfig (gone from its tmpfs after a reboot until the agent
// writes it again), the API lookup helper, the API server, the iptables
// programs.
func TestStatusNeedsOnlyWhatPlainPodsNeed(t *testing.T) {
	c := `{"cniVersion":"1.1.0","name":"k8s","type":"istio-cni"}`
	t.Setenv("PATH", t.TempDir()) // no iptables programs either
	for name, breakIt := range map[string]func(h *harness){
		"all in place": func(*harness) {},
		"no kubeconfig": func(h *harness) {
			h.getterErr = errors.New("loading kubeconfig: open /var/run/istio-cni/istio-cni-kubeconfig: no such file or directory")
		},
		"no API lookup helper":  func(h *harness) { h.getterErr = errors.New("locating istio-cni-apilookup: no such file or directory") },
		"the API server is out": func(h *harness) { h.api.err = errors.New("dial tcp 10.96.0.1:443: connect: connection refused") },
	} {
		h := newHarness()
		breakIt(h)
		if err := h.p.Status(cmdArgs(c, "")); err != nil {
			t.Errorf("%s: STATUS = %v, want success: plain pods start without any of it", name, err)
		}
		if h.api.calls != 0 {
			t.Errorf("%s: STATUS read a pod", name)
		}
		if err := h.p.GC(cmdArgs(c, "")); err != nil {
			t.Errorf("%s: GC = %v", name, err)
		}
	}
	h := newHarness()
	for _, bad := range []string{`{"cniVersion":"1.1.0","name":"k8s","type":"istio-cni","log_level":"loud"}`, `{"cniVersion":`} {
		if err := h.p.Status(cmdArgs(bad, "")); err == nil {
			t.Errorf("STATUS of %s succeeded: a config ADD cannot parse fails plain pods too", bad)
		}
		if err := h.p.GC(cmdArgs(bad, "")); err == nil {
			t.Errorf("GC of %s succeeded", bad)
		}
	}
}

func TestDelSucceedsWhenCleanupFails(t *testing.T) {
	h := newHarness()
	h.net.cleanupErr = errors.New("iptables-save: exit status 1")
	if err := h.p.Del(cmdArgs(conf("1.0.0", prevV4), podArgs)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if !strings.Contains(h.stderr.String(), "exit status 1") {
		t.Errorf("the failure must be logged: %s", h.stderr)
	}
}

func TestDelOfAPodNeverProgrammedDoesNothing(t *testing.T) {
	h := newHarness()
	if err := h.p.Del(cmdArgs(conf("1.0.0", prevV4), "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns")); err != nil {
		t.Fatal(err)
	}
	if len(h.net.cleaned) != 0 {
		t.Errorf("cleaned %v for a pod in an excluded namespace", h.net.cleaned)
	}
}

func TestDelWithBadConfigKeepsTheBackend(t *testing.T) {
	if c := fallbackConfig([]byte(`{"iptables_backend":"legacy","log_level":7}`)); c.parsed.Backend != "legacy" {
		t.Errorf("backend %q, want the pinned legacy", c.parsed.Backend)
	}
}

func TestCheckPassesUnmeshedPod(t *testing.T) {
	h := newHarness()
	pod := meshedPod(nil)
	pod.Spec.Containers = pod.Spec.Containers[:1]
	h.api.pods["team-a/web-1"] = pod
	h.net.checkDiffs = []string{"would fail"}
	if err := h.p.Check(cmdArgs(conf("1.0.0", prevV4), podArgs)); err != nil {
		t.Errorf("CHECK of an unmeshed pod: %v", err)
	}
}

// TestIPv6FromTheNamespace: a primary CNI that reports only IPv4 must not
// let IPv6 bypass the proxy.
func TestIPv6FromTheNamespace(t *testing.T) {
	h := newHarness()
	h.net.hasIPv6 = true
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(conf("1.0.0", prevV4), podArgs)); err != nil {
		t.Fatal(err)
	}
	if h.net.programmed["/var/run/netns/pod"].V6 == nil {
		t.Error("no IPv6 rules for a pod with an IPv6 address in its namespace")
	}
}

func TestConfigErrorIsLogged(t *testing.T) {
	h := newHarness()
	wantCode(t, h.p.Add(cmdArgs(`{"cniVersion":"1.0.0","log_level":"loud"}`, podArgs)), types.ErrInvalidNetworkConfig)
	if !strings.Contains(h.stderr.String(), `"msg":"ADD failed"`) {
		t.Errorf("no log line for a bad config: %q", h.stderr)
	}
}

// withAnnotations is conf with the runtimeConfig a runtime that has the
// pod-annotations capability passes.
func withAnnotations(conf string, annotations map[string]string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	m["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": annotations}
	b, _ := json.Marshal(m)
	return string(b)
}

// A pod the injector never touched (no sidecar.istio.io/status among the
// annotations the runtime passed) starts with no lookup at all: no agent,
// no API, no credential. So a node whose agent is gone for good, with the
// plugin's token expired, still starts plain pods.
func TestAddPassesThroughOnTheRuntimesAnnotations(t *testing.T) {
	h := newHarness()
	h.getterErr = errors.New("401: the plugin's token expired")
	plain := withAnnotations(conf("1.0.0", prevV4), map[string]string{"kubernetes.io/config.seen": "2026-11-24T05:00:00Z"})
	if err := h.p.Add(cmdArgs(plain, podArgs)); err != nil {
		t.Fatal(err)
	}
	if h.api.calls != 0 || len(h.net.programmed) != 0 {
		t.Errorf("%d API calls, programmed %v", h.api.calls, h.net.programmed)
	}
	assertPassThrough(t, h.stdout.Bytes(), prevV4)
	if log := h.stderr.String(); !strings.Contains(log, `"pod_from":"runtime"`) || !strings.Contains(log, string(decision.NoStatus)) {
		t.Errorf("the log line does not say the runtime's annotations decided:\n%s", log)
	}
	// An injected pod is read, and fails closed without a credential.
	h = newHarness()
	h.getterErr = errors.New("401: the plugin's token expired")
	injected := withAnnotations(conf("1.0.0", prevV4), map[string]string{decision.StatusAnnotation: "{}"})
	if err := h.p.Add(cmdArgs(injected, podArgs)); err == nil {
		t.Error("an injected pod passed without its lookup")
	}
}

// istio-cni installed into istio-system (as upstream's users do): a
// sidecar pod there is redirected like any other. Only
// exclude_namespaces excludes, never the agent's own namespace silently.
func TestAgentNamespaceIsNotExcluded(t *testing.T) {
	h := newHarness()
	h.api.pods["istio-cni/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(conf("1.0.0", prevV4), "K8S_POD_NAMESPACE=istio-cni;K8S_POD_NAME=web-1")); err != nil {
		t.Fatal(err)
	}
	if len(h.net.programmed) != 1 {
		t.Errorf("a sidecar pod in the agent's namespace was not redirected: %s", h.stderr)
	}
}
