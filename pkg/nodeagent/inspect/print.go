package inspect

import (
	"fmt"
	"io"
	"strings"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// Print writes the report for a human.
func (r Report) Print(w io.Writer) error {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	if r.Build != "" {
		line("version:   %s", r.Build)
	}
	line("pod:       %s (uid %s) on node %s, %s", r.Pod, r.UID, or(r.Node, "?"), or(r.Phase, "?"))
	switch {
	case r.ConfigErr != "":
		line("cni:       cannot read the node's CNI config: %s", r.ConfigErr)
	case r.Chained:
		line("cni:       %s (the runtime's config) chains istio-cni", r.Config)
	default:
		line("cni:       %s (the runtime's config) does NOT chain istio-cni: pods started now are not redirected", r.Config)
	}
	switch {
	case r.NewerRecord != 0:
		line("decision:  recorded for this sandbox by a newer istio-cni (record version %d; this build reads up to %d): run that version's inspect", r.NewerRecord, applied.Version)
	case r.Invalid != "":
		line("decision:  must be redirected, but its settings are refused (ADD fails): %s", r.Invalid)
	case r.Recorded && !r.Redirect:
		line("decision:  not redirected: %s (as ADD recorded for this sandbox)", r.Reason)
	case r.Recorded:
		line("decision:  redirect (%s), as ADD recorded for this sandbox", r.Families)
	case r.Redirect:
		line("decision:  redirect (%s)", r.Families)
	default:
		line("decision:  not redirected: %s", r.Reason)
	}
	switch {
	case r.InjectionErr != "":
		line("injection: not judged: %s", r.InjectionErr)
	case r.Injection != nil:
		line("injection: %s", r.Injection)
	}
	if r.SettingsChanged != "" {
		line("settings:  changed after the pod started (%s): the rules applied at start are kept; restart the pod to apply", r.SettingsChanged)
	}
	for _, n := range r.Notes {
		line("note:      %s", n)
	}
	if r.Netns != "" {
		line("netns:     %s", r.Netns)
	}
	switch {
	case r.Native:
		line("rules:     native nftables (tables %s)", strings.Join(nftables.Tables, ", "))
	case r.BackendIPv6 != "":
		line("rules:     iptables, %s (IPv6: %s)", r.Backend, r.BackendIPv6)
	case r.Backend != "":
		line("rules:     iptables, %s", r.Backend)
	}
	if r.NetnsErr != "" {
		line("netns:     not read: %s", r.NetnsErr)
	}
	if r.Redirect && r.Invalid == "" && r.NetnsErr == "" {
		section(&b, "should have", r.Want)
	}
	if r.Netns != "" && r.NetnsErr == "" {
		section(&b, "has (istio-cni's rules only)", r.Have)
	}
	line("verdict:   %s", r.Verdict().Text)
	if r.Redirect && len(r.Diffs) > 0 {
		section(&b, "differences", r.Diffs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Verdict is the report's conclusion: a stable code for programs (the
// JSON form's "verdict") and the line a human reads.
type Verdict struct {
	Code string `json:"code"`
	Text string `json:"text"`
}

// The verdict codes, stable across releases: a program (kubectl istio-cni
// why -o json) switches on them.
const (
	VerdictRedirected    = "redirected"
	VerdictNotRedirected = "not-redirected"
	VerdictMissing       = "rules-differ"
	VerdictStrayRules    = "stray-rules"
	VerdictRefused       = "settings-refused"
	VerdictMissed        = "missed-injection"
	VerdictUnknown       = "unknown"
)

// Verdict judges the report: the one source of Print's verdict line and
// the JSON form's.
func (r Report) Verdict() Verdict {
	switch {
	case r.NewerRecord != 0:
		return Verdict{VerdictUnknown, "unknown: a newer istio-cni applied this sandbox's rules; this build does not judge them"}
	case r.Invalid != "":
		return Verdict{VerdictRefused, "NOT REDIRECTED: the plugin refuses this pod's settings"}
	case r.Injection != nil && r.Injection.Missed():
		return Verdict{VerdictMissed, "NOT IN THE MESH: created without its sidecar: the injector did not mutate it; recreate it to join the mesh"}
	case r.NetnsErr != "":
		return Verdict{VerdictUnknown, "unknown: the pod's network namespace was not read"}
	case r.Redirect && len(r.Diffs) == 0:
		return Verdict{VerdictRedirected, "ok: redirected as the plugin decides"}
	case r.Redirect:
		return Verdict{VerdictMissing, fmt.Sprintf("NOT REDIRECTED: %d difference(s) from the rules it should have", len(r.Diffs))}
	case len(r.Have) > 0:
		return Verdict{VerdictStrayRules, "unexpected: not to be redirected, yet it holds istio-cni rules"}
	}
	return Verdict{VerdictNotRedirected, "ok: not redirected, as the plugin decides"}
}

func section(b *strings.Builder, title string, lines []string) {
	fmt.Fprintf(b, "%s:\n", title)
	if len(lines) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, l := range lines {
		fmt.Fprintf(b, "  %s\n", l)
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
