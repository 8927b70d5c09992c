// Package apilookup runs the plugin's API read of a pod in a helper
// binary, istio-cni-apilookup, installed beside the plugin. The node agent
// answers nearly every lookup; the API is read only when it does not. Kept
// out of the plugin, the HTTP, TLS and YAML packages that read needs cost
// no pod start their package init and memory (docs/perf-notes.md).
//
// The plugin writes the request as JSON on the helper's stdin and reads one
// JSON reply on its stdout: the pod, or why it could not be read.
package apilookup

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

// Binary is the helper's file name, in the plugin's directory.
const Binary = "istio-cni-apilookup"

// Version is the format of the request and the reply. The agent replaces
// the plugin and its helper one file after the other, so a plugin of one
// build may run the helper of another: each side refuses a newer version
// than its own rather than read part of it. Version 1 is sent without "v":
// the builds before versions were numbered sent none, and their helper
// refuses any field it does not know, so a "v" of 1 would fail them. Any
// change to either side's fields takes a new version (format_test.go).
const Version = 1

// wireVersion is what "v" holds for Version: nothing for 1.
func wireVersion() int {
	if Version == 1 {
		return 0
	}
	return Version
}

// newer says whether v, a "v" read, is a version after this build's.
func newer(v int) bool { return max(v, 1) > Version }

// Request is one lookup, sent as JSON on the helper's stdin: the plugin
// then parses no command line (the flag package's init would be every pod
// start's).
type Request struct {
	V          int           `json:"v,omitempty"`
	Kubeconfig string        `json:"kubeconfig"`
	Timeouts   kube.Timeouts `json:"timeouts"`
	// Check only loads the kubeconfig; no pod is read. The plugin's
	// STATUS asked it up to be8eded; this build's never does (STATUS
	// must not depend on what only injected pods need), but a plugin of
	// the previous build may run beside this helper while the agent
	// swaps the binaries, and must keep getting its answer.
	Check     bool   `json:"check,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// validate names the field a request lacks.
func (r Request) validate() error {
	switch {
	case newer(r.V):
		return fmt.Errorf("v: version %d, from a newer plugin; this helper reads up to %d", r.V, Version)
	case r.Kubeconfig == "":
		return errors.New("kubeconfig: required")
	case r.Timeouts.Attempt <= 0 || r.Timeouts.Total <= 0:
		return errors.New("timeouts.Attempt and timeouts.Total: required, above 0")
	case r.Check && (r.Namespace != "" || r.Name != "" || r.UID != ""):
		return errors.New("check: takes no namespace, name or uid")
	case !r.Check && (r.Namespace == "" || r.Name == ""):
		return errors.New("namespace and name: required unless check is set")
	}
	return nil
}

// reply is the helper's one line of output.
type reply struct {
	V     int         `json:"v,omitempty"`
	Pod   *kube.Pod   `json:"pod,omitempty"`
	Error *replyError `json:"error,omitempty"`
}

type replyError struct {
	// Kind is one of kinds' keys, or "config": the kubeconfig did not
	// load.
	Kind     string `json:"kind"`
	Pod      string `json:"pod,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	Message  string `json:"message"`
}

const configKind = "config"

var kinds = map[string]kube.ErrorKind{
	"unavailable":  kube.Unavailable,
	"not-found":    kube.NotFound,
	"denied":       kube.Denied,
	"bad-response": kube.BadResponse,
}

func kindName(k kube.ErrorKind) string {
	for name, v := range kinds {
		if v == k {
			return name
		}
	}
	return fmt.Sprintf("kind-%d", k)
}

// ConfigError is a kubeconfig that does not load: no pod can be read until
// it is fixed.
type ConfigError struct{ Message string }

func (e *ConfigError) Error() string { return e.Message }

// HelperError is a helper that could not be run or gave no reply.
type HelperError struct {
	Path string
	Err  error
	// Stderr is the start of what the helper wrote there.
	Stderr string
}

func (e *HelperError) Error() string {
	msg := fmt.Sprintf("the API lookup helper %s: %v", e.Path, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

func (e *HelperError) Unwrap() error { return e.Err }

// helperTimeout bounds the helper beyond its own total budget: its exec and
// start, and the kubeconfig read.
const helperTimeout = 5 * time.Second
