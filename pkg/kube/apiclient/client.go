// Package apiclient reads one pod from the Kubernetes API with the
// plugin's kubeconfig. Only the API lookup helper (cmd/plugin/apilookup)
// links it: its HTTP, TLS and YAML packages would cost every plugin exec
// their init, though the node agent answers nearly every lookup.
package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/kube"
)

// Client reads pods with one GET each, retrying with backoff.
type Client struct {
	http     *http.Client
	host     string
	timeouts kube.Timeouts
	// sleep waits between attempts; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

// NewClient builds a client from a kubeconfig file (its current context:
// server, CA, token or client certificate; loadKubeconfig).
func NewClient(kubeconfig string, t kube.Timeouts) (*Client, error) {
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return &Client{http: cfg.httpClient(), host: cfg.host, timeouts: t, sleep: sleepCtx}, nil
}

// Backoff between attempts: doubling from backoffMin up to backoffMax.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 2 * time.Second
)

// GetPod reads one pod. uid, when the runtime passed it (K8S_POD_UID), is
// the pod the sandbox belongs to. Errors are *kube.APIError.
//
// With a uid the first read is served from the API server's watch cache
// (resourceVersion=0): no etcd round trip for every pod start. The cache may
// lag behind etcd (another API server of an HA control plane), so an answer
// about another pod (a 404, or a pod of the same name with another uid, as a
// StatefulSet recreates them) is confirmed by a quorum read before it
// counts. What the decision reads of the right pod (its containers, the
// injector's annotations) is set when the pod is created, before the kubelet
// asks for a sandbox. Without a uid every read is a quorum read.
func (c *Client) GetPod(ctx context.Context, namespace, name, uid string) (*kube.Pod, error) {
	id := namespace + "/" + name
	ctx, cancel := context.WithTimeout(ctx, c.timeouts.Total)
	defer cancel()
	u := c.host + "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(name)
	cached := uid != ""
	wait := backoffMin
	for attempt := 1; ; attempt++ {
		q := u
		if cached {
			q += "?resourceVersion=0"
		}
		pod, retry, err := c.getOnce(ctx, q)
		if err == nil && uid != "" && pod.Metadata.UID != uid {
			err = &kube.APIError{Kind: kube.NotFound, Err: fmt.Errorf("the API has uid %s, the sandbox is for uid %s", pod.Metadata.UID, uid)}
		}
		if err == nil {
			return pod, nil
		}
		if cached && err.Kind == kube.NotFound {
			cached = false
			continue
		}
		if !retry {
			err.Pod = id
			return nil, err
		}
		if ctx.Err() != nil || c.sleep(ctx, wait) != nil {
			return nil, &kube.APIError{Kind: kube.Unavailable, Pod: id, Attempts: attempt, Err: err.Err}
		}
		wait = min(2*wait, backoffMax)
	}
}

// getOnce makes one attempt; retry says whether another may succeed.
func (c *Client) getOnce(ctx context.Context, u string) (*kube.Pod, bool, *kube.APIError) {
	actx, cancel := context.WithTimeout(ctx, c.timeouts.Attempt)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, &kube.APIError{Kind: kube.BadResponse, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, true, &kube.APIError{Kind: kube.Unavailable, Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, true, &kube.APIError{Kind: kube.Unavailable, Err: fmt.Errorf("reading response: %w", err)}
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		var pod kube.Pod
		if err := json.Unmarshal(body, &pod); err != nil {
			return nil, false, &kube.APIError{Kind: kube.BadResponse, Err: fmt.Errorf("decoding pod: %w", err)}
		}
		return &pod, false, nil
	case code == http.StatusNotFound:
		return nil, false, &kube.APIError{Kind: kube.NotFound, Err: statusError(resp, body)}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return nil, false, &kube.APIError{Kind: kube.Denied, Err: statusError(resp, body)}
	case code == http.StatusTooManyRequests || code >= 500:
		return nil, true, &kube.APIError{Kind: kube.Unavailable, Err: statusError(resp, body)}
	default:
		return nil, false, &kube.APIError{Kind: kube.BadResponse, Err: statusError(resp, body)}
	}
}

// statusError renders an API error response: the Status message when the
// body is one, else the start of the body.
func statusError(resp *http.Response, body []byte) error {
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return fmt.Errorf("%s: %s", resp.Status, st.Message)
	}
	if text := strings.TrimSpace(string(body[:min(len(body), 200)])); text != "" {
		return fmt.Errorf("%s: %s", resp.Status, text)
	}
	return errors.New(resp.Status)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
