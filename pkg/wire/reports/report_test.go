package reports

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func sample() Report {
	return Report{
		Time:       time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
		Verb:       "ADD",
		Pod:        "team-a/web-1",
		PodUID:     "0d5e2f4c-1111-2222-3333-444455556666",
		Container:  "c1",
		Netns:      "/var/run/netns/cni-1",
		Redirect:   true,
		Reason:     "redirect",
		Families:   "ipv4,ipv6",
		DurationMS: 12.5,
		APIMS:      3.25,
		NetnsMS:    8.125,
	}
}

func TestEncodeWireFormat(t *testing.T) {
	b, err := encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"time":"2025-03-01T12:00:00.123456789Z","verb":"ADD","pod":"team-a/web-1",` +
		`"pod_uid":"0d5e2f4c-1111-2222-3333-444455556666","container":"c1","netns":"/var/run/netns/cni-1",` +
		`"redirect":true,"reason":"redirect","families":"ipv4,ipv6","duration_ms":12.5,"api_ms":3.25,"netns_ms":8.125}`
	if string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
	rep, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := sample(); !rep.Time.Equal(want.Time) || rep.V != Version {
		t.Errorf("decoded %+v", rep)
	} else if rep.Time = want.Time; rep != (Report{V: Version, Time: want.Time, Verb: "ADD", Pod: want.Pod, PodUID: want.PodUID,
		Container: "c1", Netns: want.Netns, Redirect: true, Reason: "redirect", Families: "ipv4,ipv6",
		DurationMS: 12.5, APIMS: 3.25, NetnsMS: 8.125}) {
		t.Errorf("round trip: %+v", rep)
	}
}

// TestDecodeRefusesNewerVersions: a newer plugin's report (an agent rolled
// back while the node runs the newer plugin) is dropped, whatever it
// holds, rather than read for the fields this agent knows; a field of a
// different type is no report either.
func TestDecodeRefusesNewerVersions(t *testing.T) {
	if rep, err := decode([]byte(`{"v":1,"verb":"DEL","container":"c9"}`)); err != nil || rep.Verb != "DEL" || rep.Container != "c9" {
		t.Errorf("decode = %+v, %v", rep, err)
	}
	if _, err := decode([]byte(`{"v":2,"verb":"DEL","container":"c9","new_field":{"x":1}}`)); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a version 2 report: %v, want refused as newer", err)
	}
	for _, bad := range []string{``, `not json`, `[1]`, `{"verb":"ADD"}`, `{"v":"1"}`, `{"v":1,"redirect":"yes"}`} {
		if _, err := decode([]byte(bad)); err == nil {
			t.Errorf("decode(%q): no error", bad)
		}
	}
}

func TestEncodeTruncatesToValidJSON(t *testing.T) {
	for name, set := range map[string]func(*Report){
		"long error":      func(rep *Report) { rep.Error = strings.Repeat("iptables-restore: line 1 failed\n", 400) },
		"multibyte error": func(rep *Report) { rep.Error = strings.Repeat("é€😀", 2000) },
		"escaped error":   func(rep *Report) { rep.Error = strings.Repeat("\x01\"<\\", 3000) },
		"invalid UTF-8":   func(rep *Report) { rep.Error = strings.Repeat("\xff", 5000) },
		"every string long": func(rep *Report) {
			long := strings.Repeat("x", 3000)
			rep.Error, rep.Reason, rep.Netns, rep.Container, rep.Pod, rep.PodUID = long, long, long, long, long, long
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep := sample()
			set(&rep)
			b, err := encode(rep)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxDatagram || !json.Valid(b) {
				t.Fatalf("%d bytes, valid JSON %v", len(b), json.Valid(b))
			}
			got, err := decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(got.Error, cutMark) || !utf8.ValidString(got.Error) || got.Verb != "ADD" {
				t.Errorf("error %q... (%d bytes), verb %q", got.Error[:min(40, len(got.Error))], len(got.Error), got.Verb)
			}
			if len(b) < MaxDatagram-64 {
				t.Errorf("cut to %d bytes; want close to %d", len(b), MaxDatagram)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc..."},
		{"aé", 2, "a..."}, // 'é' is two bytes: no half rune
		{"abc", 0, ""},
		{"abc", -4, ""},
	} {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// A report's notes read back one by one: the env var names inside a note
// are joined by "+", never by the notes' ",".
func TestNotesSplitIntoEachNote(t *testing.T) {
	want := []string{NoteIPv4OnlyProxy, ProxyEnvNotRead([]string{"ISTIO_DUAL_STACK", "DISABLE_ENVOY"}), ProxyEnvNotBool([]string{"ISTIO_META_DNS_CAPTURE", "INVALID_DROP"})}
	r := Report{Note: strings.Join(want, ",")}
	if got := r.Notes(); !slices.Equal(got, want) {
		t.Errorf("Notes() = %q, want %q", got, want)
	}
}
