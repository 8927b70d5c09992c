package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// UpstreamCNIReady asks upstream istio-cni's installer, in its pod at
// podIP, whether it is ready, as its users' checks do: its readiness
// endpoint (port 8000) answers 200 and its own istio_cni_install_ready
// gauge (port 15014) is 1. It returns what it saw.
func UpstreamCNIReady(ctx context.Context, podIP string) (bool, string) {
	status, body, err := HTTPGet(ctx, "http://"+podIP+":8000/readyz")
	if err != nil || status != http.StatusOK {
		return false, fmt.Sprintf("readyz: %d %s %v", status, body, err)
	}
	_, body, err = HTTPGet(ctx, "http://"+podIP+":15014/metrics")
	if err != nil {
		return false, err.Error()
	}
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "istio_cni_install_ready ") {
			return strings.TrimSpace(line) == "istio_cni_install_ready 1", line
		}
	}
	return false, "no istio_cni_install_ready in its metrics"
}

// HTTPGet GETs url within 5 s and returns the status and body.
func HTTPGet(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
