package plugin

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
)

// The agent answers a lookup when it holds this very sandbox's pod; every
// other answer (absent, slow, another UID, another name) goes to the API,
// and the rules are the same whichever answered.
func TestAddAsksTheAgentFirst(t *testing.T) {
	const uid = "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	withUID := func(u string) *kube.Pod { p := meshedPod(nil); p.Metadata.UID = u; return p }
	c := strings.TrimSuffix(conf("1.0.0", prevV4), "}") + `,"pod_socket":"/var/run/istio-cni/pods.sock"}`
	var programmed []iptables.Model
	for _, tc := range []struct {
		name     string
		conf     string
		args     string
		agent    *kube.Pod
		agentErr error
		apiCalls int
	}{
		{"the agent holds the pod", c, podArgsUID, withUID(uid), nil, 0},
		{"the agent holds a namesake", c, podArgsUID, withUID("another-uid"), nil, 1},
		{"the agent does not answer", c, podArgsUID, nil, errors.New("dial unix: no such file"), 1},
		{"no K8S_POD_UID to check it by", c, podArgs, withUID(uid), nil, 1},
		{"no pod_socket", conf("1.0.0", prevV4), podArgsUID, withUID(uid), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			h.api.pods["team-a/web-1"] = withUID(uid)
			asked := 0
			h.p.deps.AskAgent = func(socket, ns, name string) (*kube.Pod, error) {
				asked++
				if socket != "/var/run/istio-cni/pods.sock" || ns != "team-a" || name != "web-1" {
					t.Errorf("asked %s for %s/%s", socket, ns, name)
				}
				return tc.agent, tc.agentErr
			}
			newNet := h.p.deps.NewPodNetwork
			var trusted bool
			h.p.deps.NewPodNetwork = func(c *Config) PodNetwork { trusted = c.agentChecks; return newNet(c) }
			if err := h.p.Add(cmdArgs(tc.conf, tc.args)); err != nil {
				t.Fatal(err)
			}
			// Only an agent that answered (so its audit runs) takes the
			// read-back off the ADD.
			if trusted != (tc.apiCalls == 0) {
				t.Errorf("restore trusted: %v, want %v", trusted, tc.apiCalls == 0)
			}
			if h.api.calls != tc.apiCalls {
				t.Errorf("%d API calls, want %d (agent asked %d times)", h.api.calls, tc.apiCalls, asked)
			}
			if len(h.net.programmed) != 1 {
				t.Fatalf("programmed %d models", len(h.net.programmed))
			}
			for _, m := range h.net.programmed {
				programmed = append(programmed, m)
			}
			from := "agent"
			if tc.apiCalls > 0 {
				from = "api"
			}
			if !strings.Contains(h.stderr.String(), `"pod_from":"`+from+`"`) {
				t.Errorf("the log line does not say the pod came from the %s:\n%s", from, h.stderr)
			}
		})
	}
	for _, m := range programmed[1:] {
		if !reflect.DeepEqual(m, programmed[0]) {
			t.Errorf("the rules differ with who answered:\n%+v\n%+v", *programmed[0].V4, *m.V4)
		}
	}
}
