package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Scrape is the /metrics text at url, or why not: during a rollout an
// agent may have none to give.
func Scrape(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Metric is one series' value in a scrape's text (its name and labels
// exactly as exported), and whether the series is there.
func Metric(text, series string) (float64, bool) {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f, true
		}
	}
	return 0, false
}
