package shim

import (
	"encoding/json"
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
