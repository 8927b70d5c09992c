package lookups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/test/poll"
)

func serve(t *testing.T, lookup Lookup) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pods.sock")
	s, err := Listen(path, lookup, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

func TestGet(t *testing.T) {
	runAs := "Always"
	uid := int64(1337)
	want := &kube.Pod{
		Metadata: kube.ObjectMeta{Name: "web-1", Namespace: "team-a", UID: "u-1",
			Annotations: map[string]string{"sidecar.istio.io/status": "{}"}},
		Spec: kube.PodSpec{Containers: []kube.Container{{Name: "app"}},
			InitContainers: []kube.Container{{Name: "istio-proxy", RestartPolicy: &runAs,
				SecurityContext: &kube.SecurityContext{RunAsUser: &uid},
				Env:             []kube.EnvVar{{Name: "A", ValueFrom: []byte(`{"fieldRef":{"fieldPath":"status.podIP"}}`)}}}}},
	}
	path := serve(t, func(ns, name string) (*kube.Pod, bool) {
		if ns == "team-a" && name == "web-1" {
			return want, true
		}
		return nil, false
	})
	got, err := Get(path, "team-a", "web-1", time.Second)
	if err != nil || !reflect.DeepEqual(got.Pod, want) || got.ReadsBack {
		t.Errorf("Get = %+v, %v; want %+v, not read back (no audit)", got, err, want)
	}
	if _, err := Get(path, "team-a", "web-2", time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a pod the agent does not hold: %v, want ErrNotHeld", err)
	}
	if _, err := Get(filepath.Join(t.TempDir(), "none.sock"), "team-a", "web-1", time.Second); err == nil {
		t.Error("no agent: want an error")
	}
}

// The answer says whether the agent's audit reads back what ADD programs,
// as the agent knows it at that moment.
func TestGetSaysWhetherTheAgentReadsBack(t *testing.T) {
	pod := &kube.Pod{Metadata: kube.ObjectMeta{Name: "web-1", Namespace: "team-a", UID: "u-1"}}
	path := filepath.Join(t.TempDir(), "pods.sock")
	s, err := Listen(path, func(string, string) (*kube.Pod, bool) { return pod, true }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Bool
	s.ReadsBack = reads.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, want := range []bool{false, true, false} {
		reads.Store(want)
		if got, err := Get(path, "team-a", "web-1", time.Second); err != nil || got.ReadsBack != want {
			t.Errorf("ReadsBack %v: answer %+v, %v", want, got, err)
		}
	}
}

// A wedged agent costs the plugin its budget, no more.
func TestGetBudget(t *testing.T) {
	release := make(chan struct{})
	path := serve(t, func(string, string) (*kube.Pod, bool) { <-release; return nil, false })
	t.Cleanup(func() { close(release) }) // before serve's cleanup waits for the answer
	// The agent stays wedged until the test ends: Get can return only
	// because its budget ran out, and says so.
	_, err := Get(path, "team-a", "web-1", 50*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a wedged agent: %v, want the budget's deadline", err)
	}
}

// Only root may ask: a process of another user that reaches the socket
// (its modes widened) gets no answer. The asking process is this test
// binary run by setpriv as nobody.
func TestPeerMustBeRoot(t *testing.T) {
	if path := os.Getenv("AGENTPODS_ASK"); path != "" {
		if _, err := Get(path, "team-a", "web-1", time.Second); err == nil {
			t.Fatal("answered a non-root peer")
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	pod := &kube.Pod{Metadata: kube.ObjectMeta{Name: "web-1", Namespace: "team-a"}}
	path := serve(t, func(string, string) (*kube.Pod, bool) { return pod, true })
	// Widen everything the kernel would otherwise refuse on: the check
	// under test is the peer's uid.
	dir := filepath.Dir(path)
	for p, mode := range map[string]os.FileMode{filepath.Dir(dir): 0o755, dir: 0o755, path: 0o666} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "lookups.test")
	if out, err := exec.Command("cp", self, exe).CombinedOutput(); err != nil {
		t.Fatal(err, string(out))
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", exe, "-test.run=^TestPeerMustBeRoot$", "-test.v")
	cmd.Env = append(os.Environ(), "AGENTPODS_ASK="+path)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Errorf("as nobody: %v\n%s", err, out)
	}
	if got, err := Get(path, "team-a", "web-1", time.Second); err != nil || got.Pod.Metadata.Name != "web-1" {
		t.Errorf("as root: %v, %v", got, err)
	}
}

// A socket file removed from under the agent (the run directory cleaned by
// hand, a tmpfs emptied) is bound again: the plugin finds the agent again
// within seconds instead of asking the API for every pod from then on.
func TestRemovedSocketIsBoundAgain(t *testing.T) {
	pod := &kube.Pod{Metadata: kube.ObjectMeta{Name: "web-1", Namespace: "team-a", UID: "u-1"}}
	path := serve(t, func(string, string) (*kube.Pod, bool) { return pod, true })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(path, "team-a", "web-1", time.Second); err == nil {
		t.Fatal("answered with its socket file gone")
	}
	poll.Until(t, 10*time.Second, "the socket bound again", func() (bool, string) {
		_, err := Get(path, "team-a", "web-1", time.Second)
		return err == nil, fmt.Sprint(err)
	})
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the socket bound again: %v, %v; want mode 0600", fi, err)
	}
}
