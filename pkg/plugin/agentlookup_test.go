package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/wire/lookups"
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
		name      string
		conf      string
		args      string
		agent     *kube.Pod
		readsBack bool
		agentErr  error
		apiCalls  int
		trusted   bool
		handed    string
	}{
		{"the agent holds the pod", c, podArgsUID, withUID(uid), true, nil, 0, true, ""},
		// The agent, asked to run this ADD, may have written rules.
		{"the agent handed the ADD back", c, podArgsUID, withUID(uid), true, nil, 0, false, "the agent: nf_tables refused the batch"},
		{"the agent holds the pod, its audit does not repair", c, podArgsUID, withUID(uid), false, nil, 0, false, ""},
		{"the agent holds a namesake", c, podArgsUID, withUID("another-uid"), true, nil, 1, false, ""},
		{"the agent does not answer", c, podArgsUID, nil, true, errors.New("dial unix: no such file"), 1, false, ""},
		{"no K8S_POD_UID to check it by", c, podArgs, withUID(uid), true, nil, 1, false, ""},
		{"no pod_socket", conf("1.0.0", prevV4), podArgsUID, withUID(uid), true, nil, 1, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			h.api.pods["team-a/web-1"] = withUID(uid)
			h.p.deps.HandedBack = tc.handed
			asked := 0
			h.p.deps.AskAgent = func(socket, ns, name string) (lookups.Answer, error) {
				asked++
				if socket != "/var/run/istio-cni/pods.sock" || ns != "team-a" || name != "web-1" {
					t.Errorf("asked %s for %s/%s", socket, ns, name)
				}
				return lookups.Answer{Pod: tc.agent, ReadsBack: tc.readsBack}, tc.agentErr
			}
			if err := h.p.Add(cmdArgs(tc.conf, tc.args)); err != nil {
				t.Fatal(err)
			}
			if len(h.net.writes) != 1 {
				t.Fatalf("%d writes, want 1", len(h.net.writes))
			}
			trusted := h.net.writes[0].Trusted
			// Only an agent that answered and whose audit reads back and
			// repairs takes the read-back off the ADD.
			if trusted != tc.trusted {
				t.Errorf("restore trusted: %v, want %v", trusted, tc.trusted)
			}
			if tc.handed != "" && !strings.Contains(h.stderr.String(), `"handed_back":"`+tc.handed+`"`) {
				t.Errorf("the log line does not say why the agent handed the ADD back:\n%s", h.stderr)
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

// A repeated ADD into one sandbox (a runtime's retry, Multus chaining
// istio-cni twice) always reads its rules back, which removes the jumps
// the second restore duplicated: only a sandbox ADD never programmed is
// left to the agent's read-back. A plain pod's sandbox is recorded too.
func TestRepeatedAddReadsBack(t *testing.T) {
	const uid = "0d5e2f4c-aaaa-bbbb-cccc-444455556666"
	records := t.TempDir()
	c := strings.TrimSuffix(conf("1.0.0", prevV4), "}") + `,"pod_socket":"/var/run/istio-cni/pods.sock","records_dir":"` + records + `"}`
	pod := meshedPod(nil)
	pod.Metadata.UID = uid
	h := newHarness()
	h.net.programmed = map[string]iptables.Model{}
	h.p.deps.AskAgent = func(string, string, string) (lookups.Answer, error) {
		return lookups.Answer{Pod: pod, ReadsBack: true}, nil
	}
	var trusted []bool
	netns := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		args := cmdArgs(c, podArgsUID)
		args.Netns = netns
		if err := h.p.Add(args); err != nil {
			t.Fatal(err)
		}
		trusted = append(trusted, h.net.writes[len(h.net.writes)-1].Trusted)
	}
	if len(trusted) != 2 || !trusted[0] || trusted[1] {
		t.Errorf("restore trusted on the first and second ADD: %v, want [true false]", trusted)
	}
	// A plain pod's sandbox: recorded as passed through.
	plain := newHarness()
	plainArgs := cmdArgs(withAnnotations(c, map[string]string{}), "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=plain;K8S_POD_UID=plain-uid")
	plainArgs.ContainerID, plainArgs.Netns = "c-plain", netns
	if err := plain.p.Add(plainArgs); err != nil {
		t.Fatal(err)
	}
	recs, err := (applied.Store{Dir: records}).ForPod("plain-uid")
	if err != nil || len(recs) != 1 || !recs[0].Passed || recs[0].NetnsInode == 0 || recs[0].Container != "c-plain" {
		t.Errorf("the plain pod's sandbox record: %+v, %v", recs, err)
	}
}
