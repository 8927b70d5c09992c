package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
)

// Do sends a request as AdminToken. path is absolute ("/api/v1/..."); a
// non-nil body is sent as JSON (a JSON patch for PATCH). Any HTTP status is
// returned, not an error.
func (a *APIServer) Do(ctx context.Context, method, path string, body []byte) (status int, resp []byte, err error) {
	return a.DoAs(ctx, AdminToken, method, path, body)
}

// DoAs is Do with another bearer token.
func (a *APIServer) DoAs(ctx context.Context, token, method, path string, body []byte) (status int, resp []byte, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		ct := "application/json"
		if method == http.MethodPatch {
			ct = "application/json-patch+json" // RFC 6902
		}
		req.Header.Set("Content-Type", ct)
	}
	r, err := a.admin.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer r.Body.Close()
	resp, err = io.ReadAll(r.Body)
	if err != nil {
		return r.StatusCode, nil, fmt.Errorf("%s %s: reading response: %w", method, path, err)
	}
	return r.StatusCode, resp, nil
}

// CreatePod creates the pod in podJSON in the namespace named by its
// metadata ("default" if empty), creating the namespace first if absent.
func (a *APIServer) CreatePod(ctx context.Context, podJSON []byte) error {
	var pod struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(podJSON, &pod); err != nil {
		return fmt.Errorf("create pod: decoding JSON: %w", err)
	}
	ns := pod.Metadata.Namespace
	if ns == "" {
		ns = "default"
	}
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods"
	// Try the pod first: the namespace usually exists, and a missing one
	// answers 404 (NamespaceLifecycle admission).
	status, body, err := a.Do(ctx, http.MethodPost, path, podJSON)
	if err == nil && status == http.StatusNotFound {
		if err := a.ensureNamespace(ctx, ns); err != nil {
			return fmt.Errorf("create pod %s/%s: %w", ns, pod.Metadata.Name, err)
		}
		status, body, err = a.Do(ctx, http.MethodPost, path, podJSON)
	}
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, pod.Metadata.Name, err)
	}
	if status != http.StatusCreated {
		return fmt.Errorf("create pod %s/%s: %d %s", ns, pod.Metadata.Name, status, body)
	}
	return nil
}

// ensureNamespace creates namespace ns; one that already exists is fine.
func (a *APIServer) ensureNamespace(ctx context.Context, ns string) error {
	obj, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]string{"name": ns},
	})
	if err != nil {
		return err
	}
	status, body, err := a.Do(ctx, http.MethodPost, "/api/v1/namespaces", obj)
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	if status != http.StatusCreated && status != http.StatusConflict {
		return fmt.Errorf("creating namespace %s: %d %s", ns, status, body)
	}
	return nil
}

// DeletePod deletes a pod immediately (grace period 0).
func (a *APIServer) DeletePod(ctx context.Context, ns, name string) error {
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name) + "?gracePeriodSeconds=0"
	status, body, err := a.Do(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	if status != http.StatusOK && status != http.StatusAccepted {
		return fmt.Errorf("delete pod %s/%s: %d %s", ns, name, status, body)
	}
	return nil
}

// Kubeconfig writes a kubeconfig (JSON, which clientcmd reads as YAML) that
// reaches the server as the holder of token, trusting the CA inline.
func (a *APIServer) Kubeconfig(path, token string) error {
	cfg := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "test", "cluster": map[string]any{
			"server": a.URL, "certificate-authority-data": a.caPEM, // []byte → base64
		}}},
		"users": []any{map[string]any{"name": "test", "user": map[string]any{"token": token}}},
		"contexts": []any{map[string]any{"name": "test", "context": map[string]any{
			"cluster": "test", "user": "test",
		}}},
		"current-context": "test",
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}
