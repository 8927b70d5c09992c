package inspect

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// The node agent's gauges the node summary reads from its /metrics
// (pkg/nodeagent/audit, pkg/nodeagent/missed.go; the chart's alerts fire
// on the same series).
const (
	GaugeUnredirected = "istio_cni_audit_pods_unredirected"
	GaugeChecked      = "istio_cni_audit_pods_checked"
	GaugeUnchecked    = "istio_cni_audit_pods_unchecked"
	GaugeMissed       = "istio_cni_missed_injection_pods"
)

// NodeOptions say where the node's agent and its files are.
type NodeOptions struct {
	// CNINetDir is the node's CNI config directory.
	CNINetDir string
	// HealthAddr and MetricsAddr are the agent's --health-addr and
	// --metrics-addr (":8000", ":15014"): in its pod, on the host's
	// network, reached on loopback.
	HealthAddr, MetricsAddr string
	// Build names the inspecting binary's build (version.Line).
	Build string
}

// NodeDeps are the node summary's seams.
type NodeDeps struct {
	// Get fetches a URL: its status and body.
	Get func(ctx context.Context, url string) (int, string, error)
}

// NodeDocument is the node summary (inspect --node): what the node's agent
// says of the node, as JSON under field names that stay (JSONVersion).
// Counts are absent when the agent does not export them (no API access:
// no audit).
type NodeDocument struct {
	Version int    `json:"version"`
	Build   string `json:"build,omitempty"`
	// Ready is the agent's /readyz; ReadyReason its answer when not.
	Ready       bool   `json:"ready"`
	ReadyReason string `json:"readyReason,omitempty"`
	CNI         CNI    `json:"cni"`
	// The audit's last pass and the missed-injection detector.
	Unredirected    *int   `json:"unredirected,omitempty"`
	Checked         *int   `json:"checked,omitempty"`
	Unchecked       *int   `json:"unchecked,omitempty"`
	MissedInjection *int   `json:"missedInjection,omitempty"`
	MetricsError    string `json:"metricsError,omitempty"`
}

// OK is true when the node is as it should be: the agent ready, the
// runtime's config chaining istio-cni, no meshed pod found unredirected,
// none that missed its injection.
func (d NodeDocument) OK() bool {
	return d.Ready && d.CNI.Chained && d.CNI.Error == "" && d.MetricsError == "" && zero(d.Unredirected) && zero(d.MissedInjection)
}

func zero(n *int) bool { return n == nil || *n == 0 }

// Node builds the node summary from the agent's endpoints and the node's
// CNI config directory.
func Node(ctx context.Context, o NodeOptions, d NodeDeps) NodeDocument {
	doc := NodeDocument{Version: JSONVersion, Build: o.Build}
	doc.CNI.Config, doc.CNI.Chained, doc.CNI.Error = runtimeConfigDoc(o.CNINetDir)
	status, body, err := d.Get(ctx, "http://"+loopback(o.HealthAddr)+"/readyz")
	switch {
	case err != nil:
		doc.ReadyReason = "the agent's /readyz did not answer: " + err.Error()
	case status == http.StatusOK:
		doc.Ready = true
	default:
		doc.ReadyReason = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body), "not ready:"))
	}
	status, body, err = d.Get(ctx, "http://"+loopback(o.MetricsAddr)+"/metrics")
	switch {
	case err != nil:
		doc.MetricsError = "the agent's /metrics did not answer: " + err.Error()
	case status != http.StatusOK:
		doc.MetricsError = fmt.Sprintf("the agent's /metrics answered %d", status)
	default:
		doc.Unredirected = gauge(body, GaugeUnredirected)
		doc.Checked = gauge(body, GaugeChecked)
		doc.Unchecked = gauge(body, GaugeUnchecked)
		doc.MissedInjection = gauge(body, GaugeMissed)
	}
	return doc
}

func runtimeConfigDoc(dir string) (string, bool, string) {
	name, chained, err := runtimeConfig(dir)
	if err != nil {
		return name, chained, err.Error()
	}
	return name, chained, ""
}

// loopback turns a listen address (":8000", "0.0.0.0:8000") into one to
// dial on this host.
func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// gauge reads an unlabelled series from Prometheus' text format; nil when
// it is absent.
func gauge(text, name string) *int {
	for line := range strings.SplitSeq(text, "\n") {
		v, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil
		}
		n := int(f)
		return &n
	}
	return nil
}

// Print writes the node summary for a human.
func (d NodeDocument) Print(w io.Writer) error {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	if d.Build != "" {
		line("version:      %s", d.Build)
	}
	if d.Ready {
		line("ready:        yes")
	} else {
		line("ready:        NO: %s", d.ReadyReason)
	}
	switch {
	case d.CNI.Error != "":
		line("cni:          cannot read the node's CNI config: %s", d.CNI.Error)
	case d.CNI.Chained:
		line("cni:          %s (the runtime's config) chains istio-cni", d.CNI.Config)
	default:
		line("cni:          %s (the runtime's config) does NOT chain istio-cni: pods started now are not redirected", d.CNI.Config)
	}
	if d.MetricsError != "" {
		line("audit:        not read: %s", d.MetricsError)
	} else {
		line("unredirected: %s (meshed pods found without their redirect)", count(d.Unredirected))
		line("checked:      %s, unchecked: %s (the audit's last pass)", count(d.Checked), count(d.Unchecked))
		line("missed:       %s (pods that missed their sidecar injection)", count(d.MissedInjection))
	}
	if d.OK() {
		line("verdict:      ok")
	} else {
		line("verdict:      NOT OK")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// PrintJSON writes the node summary's JSON form.
func (d NodeDocument) PrintJSON(w io.Writer) error { return writeJSON(w, d) }

func count(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}
