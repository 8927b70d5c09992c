package install

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func parse(args []string, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	finish := BindFlags(fs, getenv, "/usr/local/bin")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return finish()
}

func TestBindFlagsDefaultsEnvAndFlags(t *testing.T) {
	c, err := parse([]string{"--mode=inplace", "--cni-bin-dir=/opt/cni//bin/"}, env(map[string]string{
		"CONFLICT_REPAIRS": "7", "CONFLICT_WINDOW": "1m",
		"CNI_NET_DIR": "/etc/cni/net.d", "MODE": "owned", "EXCLUDE_NAMESPACES": "kube-system,istio-system",
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "POD_NAMESPACE": "istio-cni",
		"NATIVE_NFTABLES": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.CNINetDir != "/etc/cni/net.d" || c.Mode != Inplace || c.CNIBinDir != "/opt/cni/bin" || c.FightRepairs != 7 || c.FightWindow != time.Minute ||
		c.PluginSource != "/usr/local/bin" || len(c.ExcludeNamespaces) != 2 || c.APIHost != "10.96.0.1" ||
		c.OwnedConfigName != "02-istio-cni.conflist" || c.PluginTokenTTL != time.Hour || !c.NativeNftables {
		t.Errorf("config %+v", c)
	}
}

func TestBindFlagsRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode=sideways"}, "--mode"},
		{[]string{"--cni-net-dir=relative/dir"}, "--cni-net-dir"},
		{[]string{"--owned-config-name=../escape.conflist"}, "--owned-config-name"},
		{[]string{"--owned-config-name=02-istio-cni.conf"}, "--owned-config-name"},
		{[]string{"--primary-config-name=../10-calico.conflist"}, "--primary-config-name \"../10-calico.conflist\": want the file name"},
		{[]string{"--primary-config-name=02-istio-cni.conflist"}, "--primary-config-name"},
		{[]string{"--chained=false", "--primary-config-name=10-calico.conflist"}, "a standalone config (--chained=false) chains after no primary"},
		{[]string{"--mode=inplace", "--primary-config-name=10-calico.conflist"}, "with --mode=inplace: our entry would go into a file the runtime may not read first"},
		{[]string{"--exclude-namespaces=Kube_System"}, "--exclude-namespaces"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--conflict-repairs=1"}, "--conflict-repairs"},
		{[]string{"--conflict-window=0s"}, "--conflict-window"},
		{[]string{"--exclude-namespaces=kube-system,"}, "--exclude-namespaces"},
		{[]string{"--cni-net-dir=/host/opt/cni/bin"}, "same directory"},
		{[]string{"--host-kubeconfig-path=/var/run/istio-cni/config"}, "--host-kubeconfig-path"},
		{[]string{"--pod-namespace="}, "--pod-namespace"},
		{[]string{"--plugin-service-account=Plugin_SA"}, "--plugin-service-account"},
		{[]string{"--plugin-token-ttl=5m"}, "--plugin-token-ttl"},
		{[]string{"--plugin-token-ttl=48h"}, "--plugin-token-ttl"},
		{[]string{"--plugin-token-ttl=soon"}, "--plugin-token-ttl"},
		{[]string{"--native-nftables=sometimes"}, `--native-nftables: "sometimes": want true or false`},
		{[]string{"--runtime-drain=1m"}, "--runtime-drain"},
	} {
		_, err := parse(tc.args, env(map[string]string{"POD_NAMESPACE": "istio-cni"}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to name %s", tc.args, err, tc.want)
		}
	}
}

// TestHostKubeconfigPathOfEarlierReleases: the path earlier releases took
// (ending in upstream's file name), which manifests keep setting so that a
// rollback's agent starts, names this release's file in its directory.
func TestHostKubeconfigPathOfEarlierReleases(t *testing.T) {
	for _, path := range []string{"/var/lib/istio-cni/" + LegacyKubeconfigName, "/var/lib/istio-cni/" + KubeconfigName} {
		c, err := parse([]string{"--host-kubeconfig-path=" + path}, env(map[string]string{"POD_NAMESPACE": "istio-cni"}))
		if err != nil || c.HostKubeconfigPath != "/var/lib/istio-cni/"+KubeconfigName {
			t.Errorf("--host-kubeconfig-path=%s: %q, %v; want /var/lib/istio-cni/%s", path, c.HostKubeconfigPath, err, KubeconfigName)
		}
	}
}
