package shim

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The walker reads the entry as the full plugin's json.Unmarshal does:
// cases json.Unmarshal reads otherwise (a repeated key's merge, a null)
// are the full plugin's, and so is every document json.Valid refuses.
func TestWalkEntryDecodes(t *testing.T) {
	for in, want := range map[string]*entry{
		`{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni","pod_socket":"/var/run/istio-cni/pods.sock","cache_dir":"/c",` +
			`"iptables_backend":"auto","exclude_namespaces":["kube-system"],"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],` +
			`"ips":[{"address":"198.51.100.10/24","interface":0},{"address":"2001:db8::10/64","interface":0}],"dns":{}}}`: {
			CNIVersion: "1.0.0", PodSocket: "/var/run/istio-cni/pods.sock", CacheDir: "/c", IptablesBackend: "auto",
			PrevResult: &prevResult{IPs: []prevIP{{"198.51.100.10/24"}, {"2001:db8::10/64"}}},
		},
		// Keys match regardless of case.
		`{"Pod_Socket":"/b","prevresult":{"IPS":[{"ADDRESS":"10.0.0.1/32"}]}}`: {
			PodSocket: "/b", PrevResult: &prevResult{IPs: []prevIP{{"10.0.0.1/32"}}},
		},
		`{"prevResult":{}}`:              {PrevResult: &prevResult{}},
		`{"x":{"pod_socket":"/nested"}}`: {},
		"\t{ }\r\n":                      {},
		// The full plugin's.
		`{"POD_SOCKET":"/a","Pod_Socket":"/b"}`: nil, `{"pod_socket":"/a","prevResult":null}`: nil, `null`: nil,
		``: nil, `{"cniVersion":"0.4.0"`: nil, `{"a":1}x`: nil, `[]`: nil, `{"pod_socket":1}`: nil,
		`{"prevResult":{"ips":[1]}}`: nil, `{"prevResult":{"ips":{}}}`: nil,
	} {
		got, ok := walkEntry([]byte(in))
		var unmarshalled entry
		err := json.Unmarshal([]byte(in), &unmarshalled)
		switch {
		case want == nil && ok:
			t.Errorf("%s: read %+v, want it left to the full plugin", in, got)
		case want != nil && (!ok || !reflect.DeepEqual(got, *want)):
			t.Errorf("%s: read %+v (ok %v), want %+v", in, got, ok, *want)
		case want != nil && (err != nil || !reflect.DeepEqual(unmarshalled, *want)):
			t.Errorf("%s: json.Unmarshal reads %+v (%v), not the %+v the test wants", in, unmarshalled, err, *want)
		}
	}
}

// The walker checks the grammar as json.Valid does: a document it
// refuses is never handed to the agent as read.
func TestWalkEntryRefusesInvalidJSON(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `}`, `{"a":1}x`, `{"a":1}{}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{'a':1}`,
		`{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":{"b":1,}}`, `{"a":[}`, `{"a":{]}`,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":-a}`, `{"a":1e}`, `{"a":1e+}`, `{"a":+1}`, `{"a":0x1}`,
		`{"a":tru}`, `{"a":truex}`, `{"a":nul}`, `{"a":True}`, `{"a":NaN}`,
		`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\t\"}", `{"a":"x}`, `{"a":"\`, `{"a":"\"}`,
		`{"pod_socket":"/p"`, `{"pod_socket":"/p",}`, `{"native_nftables":tru}`, `{"native_nftables":truee}`,
		`{"prevResult":{"ips":[{"address":"a",}]}}`, `{"prevResult":{"ips":[{"address":"a"}}}`,
		"\xef\xbb\xbf{}", "{}\x00", `{"a":-01}`, `{"a":1.5.2}`, `{"a":--1}`, `{"a":1e5e5}`,
	} {
		if json.Valid([]byte(in)) {
			t.Fatalf("%q: valid JSON", in)
		}
		if e, ok := walkEntry([]byte(in)); ok {
			t.Errorf("%q: read %+v, want it refused", in, e)
		}
	}
	// Valid, but nested past maxDepth: the full plugin's too.
	deep := `{"a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`
	if _, ok := walkEntry([]byte(deep)); !json.Valid([]byte(deep)) || ok {
		t.Errorf("nested %d deep: walked %v, want it left to the full plugin", maxDepth+1, ok)
	}
	if _, ok := walkEntry([]byte(`{"a":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`)); !ok {
		t.Errorf("nested %d deep: refused, want it read", maxDepth)
	}
}

// The failed exec's error names the config's cniVersion as Unmarshal reads
// it, on past a field of the wrong type.
func TestCNIVersionReadsOnPastAWrongType(t *testing.T) {
	for in, want := range map[string]string{
		`{"cniVersion":"0.4.0","pod_socket":1}`:                 "0.4.0",
		`{"cniVersion":1,"cniVersion":"0.4.0","pod_socket":[]}`: "0.4.0",
		`{"cniVersion":"0.4.0"}`:                                "0.4.0",
		`{}`:                                                    "1.0.0",
		`{"cniVersion":"0.4.0"`:                                 "1.0.0",
		`not json`:                                              "1.0.0",
	} {
		if got := cniVersion([]byte(in)); got != want {
			t.Errorf("cniVersion(%s) = %q, want %q", in, got, want)
		}
	}
}
