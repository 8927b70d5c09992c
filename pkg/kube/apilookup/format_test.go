package apilookup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/test/formats"
)

// TestHelperFormatIsItsVersion: see test/formats.
func TestHelperFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "apilookup-request", Version, formats.JSON(Request{}))
	formats.Check(t, "apilookup-reply", Version, formats.JSON(reply{}))
}

// TestNewerVersionsAreRefused: a helper refuses a newer plugin's request,
// and a plugin a newer helper's reply, naming the versions.
func TestNewerVersionsAreRefused(t *testing.T) {
	var stdout, stderr strings.Builder
	req := `{"v":2,"kubeconfig":"/k","timeouts":{"Attempt":1,"Total":1},"namespace":"n","name":"p"}`
	if code := Serve(strings.NewReader(req), &stdout, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), "newer plugin") {
		t.Errorf("Serve of a version 2 request: exit %d, %q", code, stderr.String())
	}
	path := filepath.Join(t.TempDir(), "helper")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho '{\"v\":2,\"pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\",\"uid\":\"u\"}}}'\n"), 0o755); err != nil { // #nosec G306 -- a test helper
		t.Fatal(err)
	}
	h := Helper{Path: path, Kubeconfig: "/k", Timeouts: kube.Timeouts{Attempt: time.Second, Total: time.Second}}
	if _, err := h.GetPod(t.Context(), "n", "p", "u"); err == nil || !strings.Contains(err.Error(), "newer helper") {
		t.Errorf("a version 2 reply: %v", err)
	}
}
