package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/wire/reports"
)

// agent is a real agent socket in a temporary directory.
type agent struct {
	path    string
	reports chan reports.Report
}

// listenAgent starts a listener that reads until the test ends.
func listenAgent(t *testing.T) *agent {
	t.Helper()
	a := &agent{path: filepath.Join(t.TempDir(), "reports.sock"), reports: make(chan reports.Report, 10)}
	l, err := reports.Listen(a.path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx, func(rep reports.Report) { a.reports <- rep }); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = l.Close() })
	return a
}

// next waits for the next event; the limit only turns a hang into a failure.
func (a *agent) next(t *testing.T) reports.Report {
	t.Helper()
	select {
	case rep := <-a.reports:
		return rep
	case <-time.After(30 * time.Second):
		t.Fatal("no event reached the agent")
	}
	return reports.Report{}
}

// withSocket adds reports_socket (and debug logging) to a config.
func withSocket(c, path string) string {
	return strings.TrimSuffix(c, "}") + fmt.Sprintf(`,"log_level":"debug","reports_socket":%q}`, path)
}

const podArgsUID = podArgs + ";K8S_POD_UID=0d5e2f4c-aaaa-bbbb-cccc-444455556666"

func TestEventForRedirectedPod(t *testing.T) {
	a := listenAgent(t)
	h := newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgsUID)); err != nil {
		t.Fatal(err)
	}
	rep := a.next(t)
	if rep.V != reports.Version || rep.Verb != "ADD" || rep.Pod != "team-a/web-1" || rep.PodUID != "0d5e2f4c-aaaa-bbbb-cccc-444455556666" ||
		rep.Container != "c1" || rep.Netns != "/var/run/netns/pod" || !rep.Redirect || rep.Reason != "redirect" ||
		rep.Families != "ipv4" || rep.Error != "" || rep.DurationMS <= 0 || rep.Time.IsZero() {
		t.Errorf("event %+v", rep)
	}
}

// TestIPv4OnlyProxyNote: a dual-stack pod whose proxy is not dual-stack
// has its IPv6 captured (ipv6_redirect: always); the log line and the
// report say so. With dual-stack-only, or ISTIO_DUAL_STACK, nothing is
// said.
func TestIPv4OnlyProxyNote(t *testing.T) {
	for _, tc := range []struct {
		extra, env string
		wantNote   bool
		families   string
	}{
		{"", "", true, "ipv4,ipv6"},
		{`,"ipv6_redirect":"dual-stack-only"`, "", false, "ipv4"},
		{"", "true", false, "ipv4,ipv6"},
	} {
		a := listenAgent(t)
		h := newHarness()
		pod := meshedPod(nil)
		if tc.env != "" {
			pod.Spec.Containers[1].Env = []kube.EnvVar{{Name: "ISTIO_DUAL_STACK", Value: tc.env}}
		}
		h.api.pods["team-a/web-1"] = pod
		c := strings.TrimSuffix(withSocket(conf("1.0.0", prevDual), a.path), "}") + tc.extra + "}"
		if err := h.p.Add(cmdArgs(c, podArgsUID)); err != nil {
			t.Fatal(err)
		}
		rep := a.next(t)
		noted := rep.Note == reports.NoteIPv4OnlyProxy && strings.Contains(h.stderr.String(), "sidecar listens on IPv4 only")
		if noted != tc.wantNote || rep.Families != tc.families {
			t.Errorf("%s ISTIO_DUAL_STACK=%q: note %q, families %s; want note=%v families %s\n%s", tc.extra, tc.env, rep.Note, rep.Families,
				tc.wantNote, tc.families, h.stderr)
		}
	}
}

// TestProxyEnvUnreadOrNotABoolean: a pod whose proxy sets a setting from
// a ConfigMap (valueFrom), or to a value that is not true or false, starts
// as upstream and the proxy take it (unset; false), where a value not a
// boolean failed ADD with code 102 before: the rules are those of the
// unset value, the log line warns, naming it, and the report notes it
// for the agent to put on the pod.
func TestProxyEnvUnreadOrNotABoolean(t *testing.T) {
	for _, tc := range []struct {
		env  kube.EnvVar
		note string
		log  string
	}{
		{kube.EnvVar{Name: "INVALID_DROP", ValueFrom: []byte(`{"configMapKeyRef":{"name":"mesh","key":"drop"}}`)},
			reports.ProxyEnvNotRead([]string{"INVALID_DROP"}), "istio-proxy sets INVALID_DROP with valueFrom"},
		{kube.EnvVar{Name: "ISTIO_META_DNS_CAPTURE", Value: "yes"},
			reports.ProxyEnvNotBool([]string{"ISTIO_META_DNS_CAPTURE"}), "istio-proxy sets ISTIO_META_DNS_CAPTURE to a value that is not true or false"},
	} {
		a := listenAgent(t)
		h := newHarness()
		pod := meshedPod(nil)
		pod.Spec.Containers[1].Env = []kube.EnvVar{tc.env}
		h.api.pods["team-a/web-1"] = pod
		if err := h.p.Add(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgsUID)); err != nil {
			t.Fatal(err)
		}
		unset := newHarness()
		unset.api.pods["team-a/web-1"] = meshedPod(nil)
		if err := unset.p.Add(cmdArgs(conf("1.0.0", prevV4), podArgsUID)); err != nil {
			t.Fatal(err)
		}
		if len(h.net.programmed) != 1 || !reflect.DeepEqual(h.net.programmed, unset.net.programmed) {
			t.Errorf("%s: programmed %+v, want the rules of it unset, %+v", tc.env.Name, h.net.programmed, unset.net.programmed)
		}
		if rep := a.next(t); !rep.Redirect || rep.Error != "" || rep.Note != tc.note {
			t.Errorf("report %+v, want a redirected pod noted %q", rep, tc.note)
		}
		if !strings.Contains(h.stderr.String(), `"level":"WARN"`) || !strings.Contains(h.stderr.String(), tc.log) {
			t.Errorf("the log line does not name %s:\n%s", tc.env.Name, h.stderr)
		}
	}
}

func TestEventForFailedAdd(t *testing.T) {
	a := listenAgent(t)
	h := newHarness()
	h.api.err = &kube.APIError{Kind: kube.Unavailable, Pod: "team-a/web-1", Attempts: 9, Err: errors.New("connection refused")}
	err := h.p.Add(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgs))
	wantCode(t, err, types.ErrTryAgainLater)
	rep := a.next(t)
	if rep.Verb != "ADD" || rep.Error != err.Error() || rep.Redirect || rep.Reason != "" || rep.Pod != "team-a/web-1" || rep.Note != "" {
		t.Errorf("event %+v, want the error %q", rep, err)
	}
	// A refused token is noted, so the agent mints a new one at once.
	h.api.err = &kube.APIError{Kind: kube.Denied, Pod: "team-a/web-1", Err: errors.New("401 Unauthorized")}
	err = h.p.Add(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgs))
	wantCode(t, err, ErrAPIDenied)
	if rep := a.next(t); rep.Note != reports.NoteCredentialsRefused || rep.Error == "" {
		t.Errorf("event %+v, want the credentials-refused note", rep)
	}
}

func TestEventForPassThroughAndCheck(t *testing.T) {
	a := listenAgent(t)
	h := newHarness()
	c := withSocket(conf("1.0.0", prevV4), a.path)
	if err := h.p.Add(cmdArgs(c, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns")); err != nil {
		t.Fatal(err)
	}
	if rep := a.next(t); rep.Redirect || rep.Reason != "namespace excluded" || rep.Families != "" || rep.Error != "" {
		t.Errorf("pass-through event %+v", rep)
	}
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	h.net.checkDiffs = []string{"nat ISTIO_OUTPUT: missing rule 12"}
	err := h.p.Check(cmdArgs(c, podArgs))
	wantCode(t, err, ErrRulesMismatch)
	if rep := a.next(t); rep.Verb != "CHECK" || !rep.Redirect || !strings.Contains(rep.Error, "missing rule 12") {
		t.Errorf("CHECK event %+v", rep)
	}
}

// TestEventForDel: DEL succeeds whatever happens; the agent still hears
// about a failed cleanup, and about a config it could not read.
func TestEventForDel(t *testing.T) {
	a := listenAgent(t)
	h := newHarness()
	if err := h.p.Del(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgs)); err != nil {
		t.Fatal(err)
	}
	if rep := a.next(t); rep.Verb != "DEL" || rep.Error != "" || rep.Pod != "team-a/web-1" {
		t.Errorf("DEL event %+v", rep)
	}
	h.net.cleanupErr = errors.New("iptables-save: exit status 1")
	if err := h.p.Del(cmdArgs(withSocket(conf("1.0.0", prevV4), a.path), podArgs)); err != nil {
		t.Fatal(err)
	}
	if rep := a.next(t); rep.Verb != "DEL" || !strings.Contains(rep.Error, "exit status 1") {
		t.Errorf("failed cleanup event %+v", rep)
	}
	h.net.cleanupErr = nil
	bad := fmt.Sprintf(`{"cniVersion":"1.0.0","log_level":"loud","reports_socket":%q}`, a.path)
	if err := h.p.Del(cmdArgs(bad, podArgs)); err != nil {
		t.Fatal(err)
	}
	if rep := a.next(t); !strings.Contains(rep.Error, `"log_level"`) {
		t.Errorf("bad config event %+v", rep)
	}
}

// TestNoAgent: with nobody at the socket the verbs work as without one,
// and say nothing about it even at debug level.
func TestNoAgent(t *testing.T) {
	h := newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	c := withSocket(conf("1.0.0", prevV4), filepath.Join(t.TempDir(), "reports.sock"))
	if err := h.p.Add(cmdArgs(c, podArgs)); err != nil {
		t.Fatal(err)
	}
	assertPassThrough(t, h.stdout.Bytes(), prevV4)
	if err := h.p.Del(cmdArgs(c, podArgs)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(h.stderr.String(), "agent") {
		t.Errorf("log mentions the absent agent: %s", h.stderr)
	}
}

// TestStuckAgent: an agent that stopped reading costs a debug line, not
// the ADD.
func TestStuckAgent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reports.sock")
	l, err := reports.Listen(path) // never Run: nothing reads
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for reports.Send(path, reports.Report{Verb: "ADD"}) == nil { // fill the queue
	}
	h := newHarness()
	h.api.pods["team-a/web-1"] = meshedPod(nil)
	if err := h.p.Add(cmdArgs(withSocket(conf("1.0.0", prevV4), path), podArgs)); err != nil {
		t.Fatal(err)
	}
	assertPassThrough(t, h.stdout.Bytes(), prevV4)
	if !strings.Contains(h.stderr.String(), `"level":"DEBUG","msg":"cannot report to the agent"`) {
		t.Errorf("no debug line for the failed send: %s", h.stderr)
	}
}

// log_file is opened without following a symlink: the plugin runs as root,
// and a link planted there would make it append to any file. The verb
// still succeeds, logging to stderr and saying why.
func TestLogFileNotFollowed(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shadow")
	if err := os.WriteFile(target, []byte("root:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "cni.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	h := newHarness()
	c := strings.TrimSuffix(conf("1.0.0", prevV4), "}") + fmt.Sprintf(`,"log_file":%q}`, link)
	if err := h.p.Add(cmdArgs(c, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "root:x\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if !strings.Contains(h.stderr.String(), "cannot open log_file") {
		t.Errorf("stderr does not say why the log file is not used:\n%s", h.stderr)
	}
	plain := filepath.Join(dir, "plain.log")
	c = strings.TrimSuffix(conf("1.0.0", prevV4), "}") + fmt.Sprintf(`,"log_file":%q}`, plain)
	if err := h.p.Add(cmdArgs(c, "K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(plain); !strings.Contains(string(b), "namespace excluded") {
		t.Errorf("a plain log_file holds %q", b)
	}
}
