package shim

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// decodeEntry reads what json.Unmarshal reads, and refuses what it
// refuses.
func TestDecodeEntryIsUnmarshal(t *testing.T) {
	for _, in := range decodeSeeds {
		checkDecodeEntry(t, []byte(in))
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, in := range decodeSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(checkDecodeEntry)
}

func checkDecodeEntry(t *testing.T, in []byte) {
	var want entry
	wantErr := json.Unmarshal(in, &want)
	got, err := decodeEntry(in)
	switch {
	case (err == nil) != (wantErr == nil):
		t.Errorf("%q: decodeEntry says %v, Unmarshal %v", in, err, wantErr)
	case err == nil && !reflect.DeepEqual(got, want):
		t.Errorf("%q: decodeEntry read %+v, Unmarshal %+v", in, got, want)
	}
	// Past values of the wrong type, decode reads on as Unmarshal does:
	// a failed exec's error names the cniVersion it reads.
	var typeErr *json.UnmarshalTypeError
	if errors.As(wantErr, &typeErr) {
		if got, err := decode(in); err == nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: decode read %+v (%v) past a wrong type, Unmarshal %+v", in, got, err, want)
		}
	}
	wantVersion := "1.0.0"
	if (wantErr == nil || errors.As(wantErr, &typeErr)) && want.CNIVersion != "" {
		wantVersion = want.CNIVersion
	}
	if v := cniVersion(in); v != wantVersion {
		t.Errorf("%q: cniVersion %q, Unmarshal reads %q (%v)", in, v, wantVersion, wantErr)
	}
}

// The shim's error message is JSON that reads back as json.Marshal's.
func TestQuoteIsMarshal(t *testing.T) {
	for _, s := range quoteSeeds {
		checkQuote(t, s)
	}
}

func FuzzQuote(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(checkQuote)
}

var quoteSeeds = []string{"", "plain", "a \"b\" \\ c", "\x00\x01\n\t\x1f\x7f", "é ü 😀", "\xff\xfe bad", "\xed\xa0\x80", "<&> \u2028", "x\xc3"}

func checkQuote(t *testing.T, s string) {
	q := quote(s)
	var got, want string
	if err := json.Unmarshal([]byte(q), &got); err != nil {
		t.Fatalf("quote(%q) = %s, not a JSON string: %v", s, q, err)
	}
	m, _ := json.Marshal(s)
	if err := json.Unmarshal(m, &want); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("quote(%q) reads back as %q, json.Marshal's as %q", s, got, want)
	}
}

var decodeSeeds = []string{
	`{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni","pod_socket":"/var/run/istio-cni/pods.sock","cache_dir":"/var/run/istio-cni/cache",` +
		`"iptables_backend":"auto","exclude_namespaces":["kube-system"],"kubeconfig":"/etc/cni/net.d/k","log_level":"info",` +
		`"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"198.51.100.10/24","interface":0},{"address":"2001:db8::10/64","interface":0}],"dns":{}}}`,
	`{"POD_SOCKET":"/a","Pod_Socket":"/b","prevresult":{"IPS":[{"ADDRESS":"10.0.0.1/32"}]}}`,
	`{"pod_socket":"/a","pod_socket":null,"cniVersion":null}`,
	`{"prevResult":{"ips":[{"address":"a"},{"address":"b"}]},"prevResult":{"ips":[{},null]}}`,
	`{"prevResult":{"ips":[{"address":"a"}]},"prevResult":{"interfaces":[]}}`,
	`{"prevResult":{"ips":[]}}`, `{"prevResult":{"ips":null}}`, `{"prevResult":null}`, `{"prevResult":{}}`,
	`null`, ``, ` `, `{}`, `[]`, `"x"`, `1`, `{"a":1e400}`, `{"pod_socket":1}`, `{"prevResult":[]}`,
	`{"prevResult":{"ips":[1]}}`, `{"prevResult":{"ips":{}}}`, `{"x":{"pod_socket":"/nested"}}`,
	`{"cniVersion":1,"cniVersion":"0.4.0","pod_socket":[]}`, `{"cniVersion":"0.4.0","prevResult":{"ips":[1,{"address":5}]}}`,
	`{"prevResult":1,"cniVersion":"0.3.0"}`, `{"prevResult":[1],"pod_socket":"/a"}`, `{"prevResult":{"ips":[{"address":"a"}]},"prevResult":"x"}`,
	`{"cniVersion":"0.4.0"`, `{"cniVersion":"0.4.0",}`, `{"cni\u0056ersion":"0.3.1","POD_SOCKET":"\ud83d\ude00\ud83d"}`,
	`{"pod_socket":"\ud800\u0041"}`, `{"pod_socket":"\uDFFF\uD800\uDC00"}`, "{\"pod_socket\":\"a\xffb\xed\xa0\x80\"}",
	`{"a":-0.5e+10,"b":-01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`,
	"{\"a\":\"\t\"}", `{"a":[1,]}`, `{"a":[,1]}`, `[1,2]`, `{"a":1}}`, `{"prevResult":{"ips":[{"address":"a"}]},"prevResult":{"ips":"x"}}`,
	`{"a":1} {}`, `{"a":1}x`, `{"a":1}  `, `{"a":"\ud800"}`, `{"pod_socket":"\u00e9\n"}`, `{"a":[{"b":[1,{"c":null}]}]}`,
	`{"a" 1}`, `{"a":}`, `{,}`, `{"a":1,}`,
	`{"prevResult":{"ips":[{"address":"10.0.0.1/32"}]},"prevResult":{"ips":[]},"prevResult":{"ips":[{}]}}`,
	// Deeper than Unmarshal reads (10000 levels).
	`{"pod_socket":"/a","x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"pod_socket":"/a","prevResult":{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}}`,
}

// The failed exec's error names the config's cniVersion as Unmarshal reads
// it, on past a field of the wrong type.
func TestCNIVersionReadsOnPastAWrongType(t *testing.T) {
	for in, want := range map[string]string{
		`{"cniVersion":"0.4.0","pod_socket":1}`: "0.4.0",
		`{"cniVersion":"0.4.0"}`:                "0.4.0",
		`{}`:                                    "1.0.0",
		`not json`:                              "1.0.0",
	} {
		if got := cniVersion([]byte(in)); got != want {
			t.Errorf("cniVersion(%s) = %q, want %q", in, got, want)
		}
	}
}
