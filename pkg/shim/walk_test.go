package shim

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// The walker reads what the runtime passes the plugin: the entry the
// installer writes, after every primary chain.Owned knows, with a pod's
// annotations (escaped JSON among them) and each primary's result as
// libcni hands it on. Were it to give up on these, every ADD would pay
// for encoding/json's first decode again.
func TestWalkEntryReadsWhatTheRuntimePasses(t *testing.T) {
	legacy := pluginconf.Entry{
		Kubeconfig: "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig", ExcludeNamespaces: []string{"kube-system", "istio-system"},
		LogLevel: "info", IptablesBackend: "legacy", ReportsSocket: "/var/run/istio-cni/reports.sock",
		PodSocket: "/var/run/istio-cni/pods.sock", CacheDir: "/var/lib/istio-cni",
	}
	native := legacy
	native.IptablesBackend, native.NativeNftables = "", true
	primaries, err := filepath.Glob("../chain/testdata/primary/*")
	if err != nil || len(primaries) == 0 {
		t.Fatalf("no primaries: %v", err)
	}
	for i, path := range primaries {
		conf := []pluginconf.Entry{legacy, native}[i%2]
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			owned, err := chain.Owned(&chain.Primary{Name: filepath.Base(path), Data: data}, conf, nil)
			if err != nil {
				t.Fatal(err)
			}
			stdin := runtimeStdin(t, owned)
			got, ok := walkEntry(stdin)
			if !ok {
				t.Fatalf("the walker gave up on:\n%s", stdin)
			}
			var want entry
			if err := json.Unmarshal(stdin, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("walked %+v, json.Unmarshal reads %+v", got, want)
			}
			if got.PodSocket != conf.PodSocket || got.CacheDir != conf.CacheDir || string(got.IptablesBackend) != conf.IptablesBackend ||
				got.NativeNftables != conf.NativeNftables || got.PrevResult == nil || len(got.PrevResult.IPs) != 2 {
				t.Errorf("walked %+v from:\n%s", got, stdin)
			}
		})
	}
}

// runtimeStdin is what libcni passes the list's last plugin (ours) on ADD.
func runtimeStdin(t *testing.T, list []byte) []byte {
	t.Helper()
	conf, err := libcni.NetworkConfFromBytes(list)
	if err != nil {
		t.Fatal(err)
	}
	exec := &captureExec{}
	cni := libcni.NewCNIConfigWithCacheDir([]string{"/opt/cni/bin"}, t.TempDir(), exec)
	rt := &libcni.RuntimeConf{
		ContainerID: "0123abcd", NetNS: "/var/run/netns/cni-0123", IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}},
		CapabilityArgs: map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"sidecar.istio.io/status": `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy"]}`,
			"note":                    "caf\u00e9 \u2603 <a&b>",
		}},
	}
	if _, err := cni.AddNetworkList(context.Background(), conf, rt); err != nil {
		t.Fatal(err)
	}
	if exec.stdin == nil {
		t.Fatal("libcni never ran " + chain.PluginType)
	}
	return exec.stdin
}

// captureExec stands in for the plugins: a primary answers with a
// dual-stack result in its config's version, ours passes prevResult on
// and keeps its stdin.
type captureExec struct{ stdin []byte }

func (c *captureExec) ExecPlugin(_ context.Context, path string, stdin []byte, _ []string) ([]byte, error) {
	var conf types.PluginConf
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, err
	}
	if filepath.Base(path) == chain.PluginType {
		c.stdin = stdin
		return json.Marshal(conf.RawPrevResult)
	}
	if conf.RawPrevResult != nil {
		return json.Marshal(conf.RawPrevResult)
	}
	zero := 0
	res := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: "eth0", Mac: "0a:58:0a:f4:00:05", Sandbox: "/var/run/netns/cni-0123"}},
		IPs: []*current.IPConfig{
			{Interface: &zero, Address: net.IPNet{IP: net.ParseIP("10.244.0.5"), Mask: net.CIDRMask(24, 32)}, Gateway: net.ParseIP("10.244.0.1")},
			{Interface: &zero, Address: net.IPNet{IP: net.ParseIP("fd00:10:244::5"), Mask: net.CIDRMask(64, 128)}},
		},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, GW: net.ParseIP("10.244.0.1")}},
	}
	r, err := res.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

func (c *captureExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/opt/cni/bin/" + plugin, nil
}

func (c *captureExec) Decode(b []byte) (version.PluginInfo, error) {
	return version.PluginSupports("1.1.0"), nil
}

// The walker reads the shapes an entry has, stepping over any value it
// does not read (escapes, nesting, numbers), and leaves to the full
// plugin's json.Unmarshal what it would have to interpret.
func TestWalkEntry(t *testing.T) {
	for in, walks := range map[string]bool{
		`{"a":"\\\"","b":["]",{"c":"}\\"}],"n":-1.5e+3,"t":true,"z":null,"pod_socket":"/p"}`:                     true,
		` {"prevResult" : {"x":[[]],"IPS":[{"k":{},"Address":"10.0.0.1/32"},{}]} , "Native_Nftables" : false } `: true,
		`{"cniVersion":"1.1.0","cache_dir":"/c","iptables_backend":"nft","native_nftables":true}`:                true,
		`{}`:                             true,
		`{"prevResult":{"ips":[]}}`:      true,
		`{"pod_socket":"/a","x":"café"}`: true,
		// Valid, in a value it steps over: a lone surrogate, DEL, invalid UTF-8.
		"{\"x\":\"\\ud800\",\"y\":\"\x7f\",\"z\":\"\xff\",\"n\":[-0,0.0e-0,1E5,-1.5e+3]}": true,
		// For the full plugin to read.
		`{"pod_\u0073ocket":"/e"}`:                               false,
		`{"pod_socket":"/\u0065"}`:                               false,
		`{"pod_socket":"/café"}`:                                 false,
		`{"pod_ſocket":"/f"}`:                                    false,
		`{"pod_socket":"/a","POD_SOCKET":"/b"}`:                  false,
		`{"prevResult":{"ips":[{"address":"a","address":"b"}]}}`: false,
		`{"prevResult":{"ips":[],"ips":[]}}`:                     false,
		`{"pod_socket":null}`:                                    false,
		`{"prevResult":null}`:                                    false,
		`{"prevResult":{"ips":[null]}}`:                          false,
		`{"native_nftables":"true"}`:                             false,
		`{"pod_socket":1}`:                                       false,
		`null`:                                                   false,
		`[]`:                                                     false,
	} {
		if !json.Valid([]byte(in)) {
			t.Fatalf("%s: not JSON", in)
		}
		got, ok := walkEntry([]byte(in))
		if ok != walks {
			t.Errorf("%s: walked %v, want %v", in, ok, walks)
			continue
		}
		var want entry
		if err := json.Unmarshal([]byte(in), &want); ok && (err != nil || !reflect.DeepEqual(got, want)) {
			t.Errorf("%s: walked %+v, json.Unmarshal reads %+v (%v)", in, got, want, err)
		}
	}
}

// When the walker reads an entry, the document is one json.Valid takes,
// and the walker reads what json.Unmarshal reads; when it reads a
// cniVersion, the document is valid too.
func FuzzWalkEntry(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.0.0","pod_socket":"/p","cache_dir":"/c","iptables_backend":"auto","native_nftables":true,` +
			`"runtimeConfig":{"a":"\"x\\\u00e9"},"prevResult":{"ips":[{"address":"10.0.0.1/24","interface":0},{"gateway":"x"}],"dns":{}}}`,
		`{"POD_SOCKET":"/a","Pod_Socket":"/b","prevresult":{"IPS":[{"ADDRESS":"10.0.0.1/32"}]}}`,
		`{"pod_socket":"/a","prevResult":null}`, `{"prevResult":{}}`, `{"prevResult":{"ips":[]}}`,
		`{"x":{"pod_socket":"/nested"},"y":[1,-2.5e3,true,null,{}]}`, `null`, `[]`, `{"pod_socket":1}`,
		`{"pod_\u0073ocket":"/e"}`, `{"pod_ſocket":"/f"}`, `{"native_nftables":false,"native_nftables":true}`,
		`{"prevResult":{"ips":[null]}}`, `{"prevResult":{"ips":[{"address":"a","address":"b"}]}}`, ` { } `,
		`{"prevResult":{"ips":[{"address":"a"}],"ips":[{}]}}`, `{"prevResult":{"ips":[{"address":"a"}]},"PrevResult":{}}`,
		`{"a":01}`, `{"a":1.}`, `{"a":[1,]}`, `{"a":"\x"}`, `{"a":1}x`, `{"a" 1}`, `{"a":truex}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, ok := walkVersion(in); ok && !json.Valid(in) {
			t.Fatalf("read a cniVersion from %q, which json.Valid refuses", in)
		}
		got, ok := walkEntry(in)
		if !ok {
			return
		}
		if !json.Valid(in) {
			t.Fatalf("walked %+v from %q, which json.Valid refuses", got, in)
		}
		var want entry
		if err := json.Unmarshal(in, &want); err != nil {
			t.Fatalf("walked %+v from %q, which json.Unmarshal refuses: %v", got, in, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("walked %+v from %q, json.Unmarshal reads %+v", got, in, want)
		}
	})
}
