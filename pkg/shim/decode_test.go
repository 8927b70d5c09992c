package shim

import (
	"reflect"
	"testing"
)

// decodeEntry reads the entry as the full plugin's json.Unmarshal does,
// and refuses what it refuses: such an ADD is not handed to the agent.
func TestDecodeEntry(t *testing.T) {
	for in, want := range map[string]*entry{
		`{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni","pod_socket":"/var/run/istio-cni/pods.sock","cache_dir":"/c",` +
			`"iptables_backend":"auto","exclude_namespaces":["kube-system"],"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],` +
			`"ips":[{"address":"198.51.100.10/24","interface":0},{"address":"2001:db8::10/64","interface":0}],"dns":{}}}`: {
			CNIVersion: "1.0.0", PodSocket: "/var/run/istio-cni/pods.sock", CacheDir: "/c", IptablesBackend: "auto",
			PrevResult: &prevResult{IPs: []prevIP{{"198.51.100.10/24"}, {"2001:db8::10/64"}}},
		},
		// Keys match regardless of case; a repeated key's last value wins.
		`{"POD_SOCKET":"/a","Pod_Socket":"/b","prevresult":{"IPS":[{"ADDRESS":"10.0.0.1/32"}]}}`: {
			PodSocket: "/b", PrevResult: &prevResult{IPs: []prevIP{{"10.0.0.1/32"}}},
		},
		`{"pod_socket":"/a","prevResult":null}`: {PodSocket: "/a"},
		`{"prevResult":{}}`:                     {PrevResult: &prevResult{}},
		`{"x":{"pod_socket":"/nested"}}`:        {},
		`null`:                                  {},
		// Refused.
		``: nil, `{"cniVersion":"0.4.0"`: nil, `{"a":1}x`: nil, `[]`: nil, `{"pod_socket":1}`: nil,
		`{"prevResult":{"ips":[1]}}`: nil, `{"prevResult":{"ips":{}}}`: nil,
	} {
		got, err := decodeEntry([]byte(in))
		switch {
		case want == nil && err == nil:
			t.Errorf("%s: read %+v, want it refused", in, got)
		case want != nil && (err != nil || !reflect.DeepEqual(got, *want)):
			t.Errorf("%s: read %+v (%v), want %+v", in, got, err, *want)
		}
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
