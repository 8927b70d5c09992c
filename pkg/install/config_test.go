package install

import (
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlagsDefaultsEnvAndFlags(t *testing.T) {
	c, err := ParseFlags([]string{"--mode=inplace", "--cni-bin-dir=/opt/cni//bin/"}, env(map[string]string{
		"CONFLICT_REPAIRS": "7", "CONFLICT_WINDOW": "1m",
		"CNI_NET_DIR": "/etc/cni/net.d", "MODE": "owned", "EXCLUDE_NAMESPACES": "kube-system,istio-system",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "POD_NAMESPACE": "istio-cni",
	}), "/usr/local/bin")
	if err != nil {
		t.Fatal(err)
	}
	if c.CNINetDir != "/etc/cni/net.d" || c.Mode != Inplace || c.CNIBinDir != "/opt/cni/bin" || c.ConflictRepairs != 7 || c.ConflictWindow != time.Minute ||
		c.PluginSource != "/usr/local/bin" || len(c.ExcludeNamespaces) != 2 || c.APIHost != "10.96.0.1" ||
		c.OwnedConfigName != "02-istio-cni.conflist" || c.HealthAddr != ":8000" || c.MetricsAddr != ":15014" {
		t.Errorf("config %+v", c)
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode=sideways"}, "--mode"},
		{[]string{"--cni-net-dir=relative/dir"}, "--cni-net-dir"},
		{[]string{"--owned-config-name=../escape.conflist"}, "--owned-config-name"},
		{[]string{"--owned-config-name=02-istio-cni.conf"}, "--owned-config-name"},
		{[]string{"--exclude-namespaces=Kube_System"}, "--exclude-namespaces"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--health-addr=8000"}, "--health-addr"},
		{[]string{"--conflict-repairs=1"}, "--conflict-repairs"},
		{[]string{"--exclude-namespaces=kube-system,"}, "--exclude-namespaces"},
		{[]string{"--cni-net-dir=/host/opt/cni/bin"}, "same directory"},
		{[]string{"--host-kubeconfig-path=/var/run/istio-cni/config"}, "--host-kubeconfig-path"},
		{[]string{"--daemonset-name=Bad/Name"}, "--daemonset-name"},
		{[]string{"--pod-namespace="}, "--pod-namespace"},
		{[]string{"--plugin-service-account=Plugin_SA"}, "--plugin-service-account"},
		{[]string{"--plugin-token-ttl=5m"}, "--plugin-token-ttl"},
		{[]string{"--plugin-token-ttl=48h"}, "--plugin-token-ttl"},
		{[]string{"--plugin-token-ttl=soon"}, "--plugin-token-ttl"},
		{[]string{"--audit-action=fix"}, "--audit-action"},
		{[]string{"--audit-interval=10ms"}, "--audit-interval"},
		{[]string{"--audit-confirm=-1s"}, "--audit-confirm"},
		{[]string{"--node-taint=maybe"}, "--node-taint"},
		{[]string{"--taint-grace=1h"}, "--taint-grace"},
		{[]string{"--host-proc=proc"}, "--host-proc"},
		{[]string{"--host-root=root"}, "--host-root"},
		{[]string{"--node-name=Node_A"}, "--node-name"},
		{[]string{"stray"}, "unexpected"},
	} {
		_, err := ParseFlags(tc.args, env(map[string]string{"POD_NAMESPACE": "istio-cni"}), "/bin")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to name %s", tc.args, err, tc.want)
		}
	}
}
