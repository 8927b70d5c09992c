package plugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni","unknown_field":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubeconfig != pluginconf.DefaultKubeconfig || c.parsed.Backend != release.Auto ||
		c.parsed.Timeouts.Total != 20*time.Second || c.parsed.Timeouts.Attempt != 5*time.Second || c.PrevResult != nil ||
		c.parsed.TProxyMark != 1337 || c.parsed.TProxyTable != 133 {
		t.Errorf("defaults: %+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		conf  string
		code  uint
		field string
	}{
		{`{"cniVersion":"1.0.0"`, types.ErrDecodingFailure, "decoding"},
		{`{"cniVersion":"1.0.0","exclude_namespaces":"kube-system"}`, types.ErrInvalidNetworkConfig, `"exclude_namespaces"`},
		{`{"cniVersion":"1.0.0","exclude_namespaces":[""]}`, types.ErrInvalidNetworkConfig, `"exclude_namespaces"`},
		{`{"cniVersion":"1.0.0","kubeconfig":7}`, types.ErrInvalidNetworkConfig, `"kubeconfig"`},
		{`{"cniVersion":"1.0.0","log_level":"loud"}`, types.ErrInvalidNetworkConfig, `"log_level"`},
		{`{"cniVersion":"1.0.0","iptables_backend":"ebpf"}`, types.ErrInvalidNetworkConfig, `"iptables_backend"`},
		{`{"cniVersion":"1.0.0","api_timeout":"3m"}`, types.ErrInvalidNetworkConfig, `"api_timeout"`},
		{`{"cniVersion":"1.0.0","api_timeout":"soon"}`, types.ErrInvalidNetworkConfig, `"api_timeout"`},
		{`{"cniVersion":"1.0.0","api_timeout":"2s","api_attempt_timeout":"5s"}`, types.ErrInvalidNetworkConfig, `"api_attempt_timeout"`},
		{`{"cniVersion":"1.0.0","prevResult":{"ips":"x"}}`, types.ErrDecodingFailure, "prevResult"},
		{`{"cniVersion":"1.0.0","tproxy_mark":1338}`, types.ErrInvalidNetworkConfig, `"tproxy_mark"`},
		{`{"cniVersion":"1.0.0","tproxy_mark":-1}`, types.ErrInvalidNetworkConfig, `"tproxy_mark"`},
		{`{"cniVersion":"1.0.0","tproxy_route_table":254}`, types.ErrInvalidNetworkConfig, `"tproxy_route_table"`},
		{`{"cniVersion":"1.0.0","tproxy_route_table":"133"}`, types.ErrInvalidNetworkConfig, `"tproxy_route_table"`},
		{`{"cniVersion":"1.0.0","reports_socket":"reports.sock"}`, types.ErrInvalidNetworkConfig, `"reports_socket": "reports.sock" is not an absolute path`},
		{`{"cniVersion":"1.0.0","reports_socket":1}`, types.ErrInvalidNetworkConfig, `"reports_socket"`},
		{`{"cniVersion":"1.0.0","ipv6_redirect":"never"}`, types.ErrInvalidNetworkConfig, `"ipv6_redirect": unknown value "never": want always or dual-stack-only`},
		{`{"cniVersion":"1.0.0","records_dir":"sandboxes"}`, types.ErrInvalidNetworkConfig, `"records_dir"`},
		{`{"cniVersion":"1.0.0","log_file":"cni.log"}`, types.ErrInvalidNetworkConfig, `"log_file"`},
	} {
		_, err := parseConfig([]byte(tc.conf))
		var e *types.Error
		if !asCNI(err, &e) || e.Code != tc.code || !strings.Contains(e.Msg, tc.field) {
			t.Errorf("%s: err = %v, want code %d naming %s", tc.conf, err, tc.code, tc.field)
		}
	}
}

func TestParseConfigAllowedValuesInMessage(t *testing.T) {
	_, err := parseConfig([]byte(`{"cniVersion":"1.0.0","iptables_backend":"ebpf"}`))
	if err == nil || !strings.Contains(err.Error(), "auto, legacy or nft") {
		t.Errorf("error must list the allowed values: %v", err)
	}
}

func asCNI(err error, e **types.Error) bool { return errors.As(err, e) }

// A conflist an older agent wrote names the reports socket agent_socket:
// the plugin still reports there, for one release.
func TestOldReportsSocketKeyRead(t *testing.T) {
	c, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","type":"istio-cni","agent_socket":"/var/run/istio-cni/events.sock"}`))
	if err != nil || c.ReportsSocket != "/var/run/istio-cni/events.sock" {
		t.Errorf("reports socket %q, %v", c.ReportsSocket, err)
	}
}
