package apilookup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

// helperEnv makes this test binary the helper: Serve with fakeReader.
const helperEnv = "APILOOKUP_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(Serve(os.Stdin, os.Stdout, os.Stderr, openFake))
	}
	os.Exit(m.Run())
}

// openFake answers by pod name: "web" is found, "gone" is a 404, "slow"
// is an API that never answered, "odd" an error that is no APIError; a
// kubeconfig named "broken" does not load.
func openFake(kubeconfig string, _ kube.Timeouts) (PodReader, error) {
	if kubeconfig == "broken" {
		return nil, errors.New("loading kubeconfig broken: no current context")
	}
	return fakeReader{}, nil
}

type fakeReader struct{}

func (fakeReader) GetPod(_ context.Context, ns, name, uid string) (*kube.Pod, error) {
	id := ns + "/" + name
	switch name {
	case "web":
		p := &kube.Pod{Metadata: kube.ObjectMeta{Namespace: ns, Name: name, UID: uid, Annotations: map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}}}
		p.Spec.Containers = []kube.Container{{Name: "app"}, {Name: "istio-proxy"}}
		return p, nil
	case "gone":
		return nil, &kube.APIError{Kind: kube.NotFound, Pod: id, Err: errors.New("404 Not Found: pods \"gone\" not found")}
	case "slow":
		return nil, &kube.APIError{Kind: kube.Unavailable, Pod: id, Attempts: 4, Err: errors.New("context deadline exceeded")}
	}
	return nil, errors.New("something else")
}

// helper is a Helper running this test binary as the helper.
func helper(t *testing.T, kubeconfig string) Helper {
	t.Helper()
	t.Setenv(helperEnv, "1")
	return Helper{Path: os.Args[0], Kubeconfig: kubeconfig, Timeouts: kube.Timeouts{Attempt: time.Second, Total: 3 * time.Second}}
}

// The pod and every kind of failure cross the exec unchanged: the plugin
// decides and maps error codes exactly as if it had read the API itself.
func TestLookupThroughTheHelper(t *testing.T) {
	h := helper(t, "/etc/kubeconfig")
	pod, err := h.GetPod(t.Context(), "default", "web", "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if pod.Metadata.UID != "uid-1" || len(pod.Spec.Containers) != 2 || pod.Spec.Containers[1].Name != "istio-proxy" || pod.Metadata.Annotations["sidecar.istio.io/status"] == "" {
		t.Errorf("pod %+v", pod)
	}
	for name, want := range map[string]kube.APIError{
		"gone": {Kind: kube.NotFound, Pod: "default/gone"},
		"slow": {Kind: kube.Unavailable, Pod: "default/slow", Attempts: 4},
		"odd":  {Kind: kube.BadResponse, Pod: "default/odd"},
	} {
		_, err := h.GetPod(t.Context(), "default", name, "")
		var got *kube.APIError
		if !errors.As(err, &got) || got.Kind != want.Kind || got.Pod != want.Pod || got.Attempts != want.Attempts {
			t.Errorf("%s: %#v, want %+v", name, err, want)
		}
	}
	if err := olderPluginsCheck(t, h); err != nil {
		t.Errorf("check: %v", err)
	}
}

// olderPluginsCheck sends the request an older plugin's STATUS sent (the
// builds up to be8eded asked the helper whether the kubeconfig loads): while
// binaries are swapped, such a plugin may run beside this helper, and an
// error here would make its node NotReady.
func olderPluginsCheck(t *testing.T, h Helper) error {
	t.Helper()
	_, err := h.run(t.Context(), Request{Kubeconfig: h.Kubeconfig, Timeouts: h.Timeouts, Check: true})
	return err
}

func TestKubeconfigThatDoesNotLoad(t *testing.T) {
	h := helper(t, "broken")
	_, err := h.GetPod(t.Context(), "default", "web", "")
	var cfgErr *ConfigError
	if !errors.As(err, &cfgErr) || !strings.Contains(err.Error(), "no current context") {
		t.Errorf("lookup: %v", err)
	}
	if err := olderPluginsCheck(t, h); !errors.As(err, &cfgErr) {
		t.Errorf("check: %v", err)
	}
}

// A helper that is missing, fails, or answers with anything but this
// very pod is an error that names it: never a pod, whose decision would
// then be this sandbox's.
func TestHelperMissingOrBroken(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	web := `{"pod":{"metadata":{"name":"web","namespace":"default","uid":"u1"},"spec":{"containers":[{"name":"app"}]}}}`
	for path, want := range map[string]string{
		filepath.Join(dir, Binary):                                                                 "no such file",
		script("garbage", "echo not json; echo oops >&2; exit 1"):                                  "oops",
		script("failed", "echo '"+web+"'; exit 1"):                                                 "exit status 1",
		script("other", `echo '{"pod":{"metadata":{"name":"other","namespace":"x","uid":"u9"}}}'`): "the reply holds x/other",
		script("empty-pod", `echo '{"pod":{}}'`):                                                   "the reply holds /",
		script("other-uid", "echo '"+strings.Replace(web, "u1", "u2", 1)+"'"):                      `uid "u2"`,
		script("nothing", "echo '{}'"):                                                             "neither a pod nor an error",
	} {
		h := Helper{Path: path, Kubeconfig: "k", Timeouts: kube.Timeouts{Attempt: time.Second, Total: time.Second}}
		pod, err := h.GetPod(t.Context(), "default", "web", "u1")
		var helperErr *HelperError
		if pod != nil || !errors.As(err, &helperErr) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, %v; want a HelperError naming it and %q", path, pod, err, want)
		}
	}
}

// A request the helper cannot use is exit 2 and a message naming the
// field, never a reply.
func TestBadRequests(t *testing.T) {
	for in, want := range map[string]string{
		`{"timeouts":{"Attempt":1000000000,"Total":1000000000},"namespace":"ns","name":"p"}`:                 "kubeconfig: required",
		`{"kubeconfig":"k","namespace":"ns","name":"p"}`:                                                     "timeouts.Attempt and timeouts.Total",
		`{"kubeconfig":"k","timeouts":{"Attempt":1000000000,"Total":1000000000},"name":"p"}`:                 "namespace and name: required",
		`{"kubeconfig":"k","timeouts":{"Attempt":1000000000,"Total":1000000000},"check":true,"name":"p"}`:    "check: takes no",
		`{"kubeconfig":"k","timeouts":{"Attempt":1000000000,"Total":1000000000},"namespace":"ns","nam":"p"}`: "unknown field",
		`not json`: "invalid character",
	} {
		var stdout, stderr strings.Builder
		if code := Serve(strings.NewReader(in), &stdout, &stderr, openFake); code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2, nothing, %q", in, code, stdout.String(), stderr.String(), want)
		}
	}
}
