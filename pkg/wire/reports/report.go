// Package reports carries the plugin's per-verb outcomes to the node
// agent: the wire format (Report, one JSON object per datagram) and the two
// ends of a local unix datagram socket (Send in the plugin, Listener in the
// agent). Reporting is best effort: Send never blocks a verb for long and an
// absent agent is an ordinary, ignorable result (ErrNoAgent).
package reports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Version is the wire format's version, sent as "v". A plugin of one build
// reports to the agent of another while one replaces the other: the agent
// reads every version up to its own and drops a newer one rather than read
// half of it. Any change to the fields takes a new version
// (format_test.go).
const Version = 1

// MaxDatagram bounds an encoded report. Send shortens the long strings (in
// practice the error) to fit; the Listener drops anything larger.
const MaxDatagram = 4096

// Report is one verb's outcome, as the plugin logs it.
type Report struct {
	V    int       `json:"v"`    // Version; Send sets it
	Time time.Time `json:"time"` // when the verb finished; RFC 3339 with nanoseconds
	Verb string    `json:"verb"` // ADD, DEL or CHECK
	// Pod is "namespace/name", empty when CNI_ARGS names no pod.
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"pod_uid,omitempty"`
	Container string `json:"container"` // the runtime's container (sandbox) ID
	Netns     string `json:"netns,omitempty"`
	// Redirect and Reason are the decision (decision.Reason); Reason is
	// empty when the verb failed or ended before deciding.
	Redirect bool   `json:"redirect"`
	Reason   string `json:"reason,omitempty"`
	// Families are the address families redirected: "ipv4", "ipv6",
	// "ipv4,ipv6", or empty when nothing was.
	Families string `json:"families,omitempty"`
	// Note is what the agent should tell people of the pod: Note* codes,
	// comma-separated (Notes), or empty. An agent that knows none of
	// them logs the text.
	Note string `json:"note,omitempty"`
	// Error is the verb's error, empty on success. A DEL reports its
	// cleanup problem here although DEL itself always succeeds.
	Error string `json:"error,omitempty"`
	// DurationMS is the whole verb; APIMS the pod lookup and NetnsMS the
	// work in the pod's network namespace, when there were any.
	DurationMS float64 `json:"duration_ms,omitempty"`
	APIMS      float64 `json:"api_ms,omitempty"`
	NetnsMS    float64 `json:"netns_ms,omitempty"`
}

// NoteIPv4OnlyProxy: ADD captured the pod's IPv6 but its proxy is not
// dual-stack (decision.IPv6ProxyNote); the agent says so once per pod.
const NoteIPv4OnlyProxy = "ipv6-captured-ipv4-only-proxy"

// NoteCredentialsRefused: the API server refused the plugin's token (401
// or 403); the agent mints a new one at once.
const NoteCredentialsRefused = "credentials-refused"

// NoteProxyEnvNotRead opens the note that ADD took istio-proxy env vars
// set with valueFrom as unset (decision.Decision.Unread): the prefix,
// then their names joined by "+" (ProxyEnvNotRead).
const NoteProxyEnvNotRead = "proxy-env-not-read:"

// ProxyEnvNotRead is the note naming env vars ADD took as unset.
func ProxyEnvNotRead(names []string) string { return NoteProxyEnvNotRead + strings.Join(names, "+") }

// NoteProxyEnvNotBool opens the note that ADD took boolean istio-proxy
// env vars set to something else than true or false as false
// (decision.Decision.NotBool): the prefix, then their names joined by
// "+" (ProxyEnvNotBool). An agent before it logs the note only.
const NoteProxyEnvNotBool = "proxy-env-not-bool:"

// ProxyEnvNotBool is the note naming env vars ADD took as false.
func ProxyEnvNotBool(names []string) string { return NoteProxyEnvNotBool + strings.Join(names, "+") }

// Notes are the report's Note codes.
func (r Report) Notes() []string {
	if r.Note == "" {
		return nil
	}
	return strings.Split(r.Note, ",")
}

// cutMark ends a string that encode shortened.
const cutMark = "..."

// encode returns rep as one JSON object of at most MaxDatagram bytes. When
// it would be longer it cuts every string field to the longest length that
// fits (found by bisection, a dozen encodings): short fields stay whole and
// the long ones (the error, in practice) share the room. With every string
// empty a report is a few hundred bytes, so a fit always exists.
func encode(rep Report) ([]byte, error) {
	rep.V = Version
	b, err := marshal(rep)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s report: %w", rep.Verb, err)
	}
	if len(b) <= MaxDatagram {
		return b, nil
	}
	fits := func(n int) []byte {
		cut := rep
		for _, f := range []*string{&cut.Error, &cut.Reason, &cut.Netns, &cut.Container, &cut.Pod, &cut.PodUID, &cut.Families, &cut.Note, &cut.Verb} {
			*f = truncate(*f, n)
		}
		if b, err := marshal(cut); err == nil && len(b) <= MaxDatagram {
			return b
		}
		return nil
	}
	best := fits(0)
	if best == nil {
		return nil, fmt.Errorf("encoding the %s report: over %d bytes without its strings", rep.Verb, MaxDatagram)
	}
	for lo, hi := 0, MaxDatagram; hi-lo > 1; { // fits(lo), and not fits(hi)
		mid := (lo + hi) / 2
		if b := fits(mid); b != nil {
			lo, best = mid, b
		} else {
			hi = mid
		}
	}
	return best, nil
}

// marshal is json.Marshal without HTML escaping ('<' in an error message
// stays one byte) and without the encoder's trailing newline.
func marshal(rep Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rep); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// truncate cuts s to at most n bytes on a UTF-8 boundary and marks the cut;
// n <= 0 gives "".
func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + cutMark
}

// decode parses one datagram. A datagram that is not a JSON object, lacks
// the version, or is of a newer version, is not a report this agent reads.
func decode(b []byte) (Report, error) {
	var v struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Report{}, fmt.Errorf("not a report: %w", err)
	}
	switch {
	case v.V < 1:
		return Report{}, fmt.Errorf("not a report: no version (\"v\")")
	case v.V > Version:
		return Report{}, fmt.Errorf("a report of version %d, from a newer plugin; this agent reads up to %d", v.V, Version)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return Report{}, fmt.Errorf("not a report: %w", err)
	}
	return rep, nil
}
