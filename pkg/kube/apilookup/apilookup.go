// Package apilookup runs the plugin's API read of a pod in a helper
// binary, istio-cni-apilookup, installed beside the plugin. The node agent
// answers nearly every lookup; the API is read only when it does not. Kept
// out of the plugin, the HTTP, TLS and YAML packages that read needs cost
// no pod start their package init and memory (docs/perf-notes.md).
//
// The plugin runs the helper with the request as flags and reads one JSON
// reply on its stdout: the pod, or why it could not be read.
package apilookup

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

// Binary is the helper's file name, in the plugin's directory.
const Binary = "istio-cni-apilookup"

// Request is one lookup.
type Request struct {
	Kubeconfig string
	Timeouts   kube.Timeouts
	// Check only loads the kubeconfig (the plugin's STATUS); no pod is
	// read.
	Check                bool
	Namespace, Name, UID string
}

// Args renders r as the helper's command line.
func (r Request) Args() []string {
	args := []string{"-kubeconfig=" + r.Kubeconfig, "-attempt-timeout=" + r.Timeouts.Attempt.String(), "-total-timeout=" + r.Timeouts.Total.String()}
	if r.Check {
		return append(args, "-check")
	}
	return append(args, "--", r.Namespace, r.Name, r.UID)
}

// ParseArgs reads a command line Args wrote.
func ParseArgs(args []string, stderr io.Writer) (Request, error) {
	fs := flag.NewFlagSet(Binary, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var r Request
	fs.StringVar(&r.Kubeconfig, "kubeconfig", "", "the plugin's kubeconfig file")
	fs.DurationVar(&r.Timeouts.Attempt, "attempt-timeout", 0, "bound of one API request")
	fs.DurationVar(&r.Timeouts.Total, "total-timeout", 0, "bound of the lookup, retries included")
	fs.BoolVar(&r.Check, "check", false, "only load the kubeconfig")
	if err := fs.Parse(args); err != nil {
		return r, err
	}
	switch {
	case r.Kubeconfig == "":
		return r, errors.New("-kubeconfig: required")
	case r.Timeouts.Attempt <= 0 || r.Timeouts.Total <= 0:
		return r, errors.New("-attempt-timeout and -total-timeout: required, above 0")
	case r.Check && fs.NArg() != 0:
		return r, fmt.Errorf("-check takes no arguments, got %q", fs.Args())
	case !r.Check && (fs.NArg() != 3 || fs.Arg(0) == "" || fs.Arg(1) == ""):
		return r, fmt.Errorf("want NAMESPACE NAME UID (UID may be empty), got %q", fs.Args())
	}
	if !r.Check {
		r.Namespace, r.Name, r.UID = fs.Arg(0), fs.Arg(1), fs.Arg(2)
	}
	return r, nil
}

// reply is the helper's one line of output.
type reply struct {
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
