package apilookup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"

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
	rep, err := h.run(ctx, Request{Kubeconfig: h.Kubeconfig, Timeouts: h.Timeouts, Namespace: namespace, Name: name, UID: uid})
	if err != nil {
		return nil, err
	}
	if rep.Pod == nil {
		return nil, &HelperError{Path: h.Path, Err: errors.New("the reply holds neither a pod nor an error")}
	}
	return rep.Pod, nil
}

// Check says whether the kubeconfig loads (STATUS).
func (h Helper) Check(ctx context.Context) error {
	_, err := h.run(ctx, Request{Kubeconfig: h.Kubeconfig, Timeouts: h.Timeouts, Check: true})
	return err
}

func (h Helper) run(ctx context.Context, r Request) (*reply, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeouts.Total+helperTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.Path, r.Args()...) // #nosec G204 -- our helper, beside the plugin
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep reply
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		if runErr == nil {
			runErr = fmt.Errorf("reading its reply: %w", err)
		}
		return nil, &HelperError{Path: h.Path, Err: runErr, Stderr: head(stderr.String(), 500)}
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
