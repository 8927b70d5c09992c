package apilookup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

// Helper runs the helper binary at Path: the plugin's side.
type Helper struct {
	Path       string
	Kubeconfig string
	Timeouts   kube.Timeouts
}

// GetPod reads one pod through the helper. Errors are *kube.APIError as
// from the API, *ConfigError for a kubeconfig that does not load, or
// *HelperError.
func (h Helper) GetPod(ctx context.Context, namespace, name, uid string) (*kube.Pod, error) {
	rep, err := h.run(ctx, Request{V: wireVersion(), Kubeconfig: h.Kubeconfig, Timeouts: h.Timeouts, Namespace: namespace, Name: name, UID: uid})
	if err != nil {
		return nil, err
	}
	// Never another pod: its decision would be this sandbox's.
	switch m := rep.Pod; {
	case m == nil:
		return nil, &HelperError{Path: h.Path, Err: errors.New("the reply holds neither a pod nor an error")}
	case m.Metadata.Namespace != namespace || m.Metadata.Name != name || (uid != "" && m.Metadata.UID != uid):
		return nil, &HelperError{Path: h.Path, Err: fmt.Errorf("asked for %s/%s uid %q, the reply holds %s/%s uid %q",
			namespace, name, uid, m.Metadata.Namespace, m.Metadata.Name, m.Metadata.UID)}
	}
	return rep.Pod, nil
}

func (h Helper) run(ctx context.Context, r Request) (*reply, error) {
	budget := helperTimeout // a check reads only the kubeconfig
	if !r.Check {
		budget += r.Timeouts.Total
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	req, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.Path) // #nosec G204 -- our helper, beside the plugin
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	// A plugin the runtime kills takes its helper along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	// Only an exit 0 vouches for the reply: a helper that failed midway
	// may have printed anything.
	if err := cmd.Run(); err != nil {
		return nil, &HelperError{Path: h.Path, Err: err, Stderr: head(stderr.String(), 500)}
	}
	var rep reply
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return nil, &HelperError{Path: h.Path, Err: fmt.Errorf("reading its reply: %w", err), Stderr: head(stderr.String(), 500)}
	}
	if newer(rep.V) {
		return nil, &HelperError{Path: h.Path, Err: fmt.Errorf("its reply is of version %d, from a newer helper; this plugin reads up to %d", rep.V, Version)}
	}
	if e := rep.Error; e != nil {
		if e.Kind == configKind {
			return nil, &ConfigError{Message: e.Message}
		}
		kind, ok := kinds[e.Kind]
		if !ok {
			return nil, &HelperError{Path: h.Path, Err: fmt.Errorf("unknown error kind %q: %s", e.Kind, e.Message)}
		}
		return nil, &kube.APIError{Kind: kind, Pod: e.Pod, Attempts: e.Attempts, Err: errors.New(e.Message)}
	}
	return &rep, nil
}

func head(s string, n int) string { return s[:min(len(s), n)] }
