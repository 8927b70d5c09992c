package shim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The shim's error result is byte for byte json.Encoder's, HTML left
// unescaped, of the fields a CNI error has.
func TestErrorResultIsEncodingJSONs(t *testing.T) {
	for _, msg := range []string{
		"istio-cni: running /opt/cni/bin/istio-cni-full: no such file or directory",
		"quote \" backslash \\ slash / <html> & 'single'", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"café ünïcödé 日本", "invalid \xff\xfe utf-8 \xc3", "line\u2028para\u2029", "\U0001F600", "",
	} {
		if got, want := errorResult("0.4.0", 999, msg), encoded(t, "0.4.0", 999, msg); got != want {
			t.Errorf("%q:\n got %s\nwant %s", msg, got, want)
		}
	}
}

func FuzzErrorResult(f *testing.F) {
	f.Add("1.0.0", "istio-cni: reading stdin: timeout")
	f.Add("0.3.1", "\x00\"\\\u2028\xff")
	f.Fuzz(func(t *testing.T, version, msg string) {
		if got, want := errorResult(version, 999, msg), encoded(t, version, 999, msg); got != want {
			t.Fatalf("%q, %q:\n got %s\nwant %s", version, msg, got, want)
		}
	})
}

// encoded is encoding/json's CNI error.
func encoded(t *testing.T, version string, code int, msg string) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		CNIVersion string `json:"cniVersion"`
		Code       int    `json:"code"`
		Msg        string `json:"msg"`
	}{version, code, msg}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
