package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Scrape is the /metrics text at url (HTTPGet), or why not: during a
// rollout an agent may have none to give.
func Scrape(ctx context.Context, url string) (string, error) {
	status, body, err := HTTPGet(ctx, url)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("GET %s: %d", url, status)
	}
	return body, err
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

// AuditPasses is a condition for poll.Until: true once the agent whose
// /metrics is at url has finished count audit passes begun after the
// condition's first call, the last of which checked at least meshed pods.
// The pass in progress at that first call may have begun before it, so
// count+1 must end. Until the agent answers (a rollout may be replacing
// it) it is false, with the reason.
func AuditPasses(ctx context.Context, url string, count float64, meshed int) func() (bool, string) {
	first := -1.0
	return func() (bool, string) {
		text, err := Scrape(ctx, url)
		if err != nil {
			return false, err.Error()
		}
		passes, found := Metric(text, "istio_cni_audit_pass_seconds_count")
		checked, _ := Metric(text, "istio_cni_audit_pods_checked")
		if first < 0 && found {
			first = passes
		}
		return first >= 0 && passes >= first+count+1 && checked >= float64(meshed),
			fmt.Sprintf("passes %v (first seen %v), pods checked %v", passes, first, checked)
	}
}
