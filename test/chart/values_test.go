package chart

import (
	"fmt"
	"strings"
	"testing"
)

// TestSchemaRefusesMistakes: a misspelt or mistyped value fails the
// install, naming it.
func TestSchemaRefusesMistakes(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"cniBinDIr=/x", "cniBinDIr"},
		{"chained=maybe", "/chained"},
		{"global.platform=eks", "/global/platform"},
		{"logging.level=loud", "/logging/level"},
		{"repair.labelPod=true", "labelPod"},
		{"excludeNamespaces[0]=Kube_System", "/excludeNamespaces/0"},
		{"healthPort=0", "/healthPort"},
		{"cniConfDir=relative", "/cniConfDir"},
		{"istioOwnedCNIConfigFileName=istio-cni.conf", "/istioOwnedCNIConfigFileName"},
		{"chained=false,cniConfFileName=istio-cni.conflist", "want a name ending in .conf"},
		{"cniConfFileName=10-calico.conflist,istioOwnedCNIConfig=false", "with istioOwnedCNIConfig false: istio-cni's entry would go into a file the runtime may not read first"},
		{"cniConfFileName=02-istio-cni.conflist", "names istio-cni's own conflist"},
		{"logging.level=none", "/logging/level"},
		{"global.resourceScope=some", "/global/resourceScope"},
		{"repair.initContainerName=Istio_Validation", "/repair/initContainerName"},
		{"profile=minimal", "profile \"minimal\": want one of"},
		{"compatibilityVersion=1.20", "compatibilityVersion \"1.20\": want one of"},
		{"ambient.enabled=true", "ambient.enabled true: istio-cni puts pods into a sidecar mesh only"},
		{"cni.ambient.enabled=true", "ambient.enabled true"},
		{"cni.cniBinDIr=/x", "cniBinDIr"},
		{"defaults.hub=x", "defaults: set values at the top level"},
		{"missedInjection.mode=delete", "/missedInjection/mode"},
		{"missedInjection.restartsPerMinute=0", "/missedInjection/restartsPerMinute"},
		// env overrides the config's shape only into what the agent accepts:
		// a refused combination would stop every agent at start.
		{"env.MODE=sideways", `env.MODE "sideways": want owned or inplace`},
		{"env.MODE=inplace,cniConfFileName=10-calico.conflist", "with env.MODE inplace: istio-cni's entry would go into a file the runtime may not read first"},
		{"istioOwnedCNIConfig=false,env.PRIMARY_CONFIG_NAME=10-calico.conflist", "env.PRIMARY_CONFIG_NAME \"10-calico.conflist\" with istioOwnedCNIConfig false"},
		{"env.PRIMARY_CONFIG_NAME=02-istio-cni.conflist", "names istio-cni's own conflist"},
		{"env.PRIMARY_CONFIG_NAME=../calico.conflist", `env.PRIMARY_CONFIG_NAME "../calico.conflist": want the file name of the primary CNI's config`},
		{"env.CHAINED_CNI_PLUGIN=maybe", `env.CHAINED_CNI_PLUGIN "maybe": want true or false`},
		{"env.LOG_LEVEL=verbose", `env.LOG_LEVEL "verbose": want debug, info, warn or error`},
		{"env.IPV6_REDIRECT=nope", `env.IPV6_REDIRECT "nope": want always or dual-stack-only`},
		{"env.IPTABLES_BACKEND=xtables", `env.IPTABLES_BACKEND "xtables": want auto, legacy or nft`},
		{"env.CONFLICT_REPAIRS=1", `env.CONFLICT_REPAIRS "1": want a whole number of at least 2`},
		{"env.PLUGIN_TOKEN_TTL=1m", `env.PLUGIN_TOKEN_TTL "1m": want a duration from 10m to 24h`},
		{"env.PLUGIN_TOKEN_TTL=24h1s", `env.PLUGIN_TOKEN_TTL "24h1s": want a duration from 10m to 24h`},
		{"env.AUDIT_INTERVAL=500ms", `env.AUDIT_INTERVAL "500ms": want a duration from 1s to 1h`},
		{"env.AUDIT_CONFIRM=2m", `env.AUDIT_CONFIRM "2m": want a duration from 0s to 1m`},
		{"env.TAINT_GRACE=soon", `env.TAINT_GRACE "soon": want a duration from 1s to 10m`},
		{"env.NODE_TAINT=maybe", `env.NODE_TAINT "maybe": want true or false`},
		{"env.NATIVE_NFTABLES=maybe", `env.NATIVE_NFTABLES "maybe": want true or false`},
		{"global.nativeNftables=true,ipv6Redirect=dual-stack-only", "ipv6Redirect dual-stack-only with global.nativeNftables"},
		{"env.NATIVE_NFTABLES=true,env.IPV6_REDIRECT=dual-stack-only", "ipv6Redirect dual-stack-only with global.nativeNftables"},
		{"env.HEALTH_ADDR=8000", `env.HEALTH_ADDR "8000": want host:port or :port`},
		{"env.MISSED_INJECTION_RESTARTS_PER_MINUTE=61", `env.MISSED_INJECTION_RESTARTS_PER_MINUTE "61": want a whole number from 1 to 60`},
		{"env.ISTIO_NAMESPACE=Istio", `env.ISTIO_NAMESPACE "Istio": want a namespace name`},
		{"env.CNI_BIN_DIR=relative", `env.CNI_BIN_DIR "relative": want an absolute path`},
		{"env.RUNTIME_DRAIN=1m", `env.RUNTIME_DRAIN "1m": want a duration from 0s to 10s`},
		{"env.CNI_CONF_GROUP_READ=maybe", `env.CNI_CONF_GROUP_READ "maybe": want true or false`},
		{"taint.name=cni.istio.io/not ready", `taint.name "cni.istio.io/not ready": want a taint key`},
		{"env.TAINT_KEY=a/b/c", `env.TAINT_KEY "a/b/c": want a taint key`},
		{"taint.name=node.kubernetes.io/network-unavailable", `taint.name "node.kubernetes.io/network-unavailable": a key under kubernetes.io or k8s.io belongs to Kubernetes`},
		{"taint.nmae=x", `taint`},
		{"env.CHAINED_CNI_PLUGIN=false,env.OWNED_CONFIG_NAME=02-istio-cni.conflist", "cniConfFileName (or env.OWNED_CONFIG_NAME) \"02-istio-cni.conflist\": standalone"},
		{"env.CHAINED_CNI_PLUGIN=false,cniConfFileName=10-calico.conflist", "standalone (chained false), istio-cni writes one plugin config"},
		{"env.CHAINED_CNI_PLUGIN=false,env.MODE=inplace", "env.MODE inplace: a standalone config (chained false) is always istio-cni's own"},
		{"env.CHAINED_CNI_PLUGIN=false,env.PRIMARY_CONFIG_NAME=10-calico.conflist", "a standalone config (chained false) chains after no primary"},
		{"env.OWNED_CONFIG_NAME=istio.conf", `istioOwnedCNIConfigFileName (or env.OWNED_CONFIG_NAME) "istio.conf"`},
	} {
		out, err := helmTemplateOut(t, "x", chartDir(t), "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: %v, output:\n%s\nwant it refused, naming %s", tc.set, err, out, tc.want)
		}
	}
}

func daemonSet(objs map[string]map[string]any) map[string]any {
	return objs["DaemonSet istio-cni/istio-cni-node"]
}

func configData(objs map[string]map[string]any) map[string]any {
	d, _ := objs["ConfigMap istio-cni/istio-cni-config"]["data"].(map[string]any)
	return d
}

func hostPaths(ds map[string]any) map[string]string {
	out := map[string]string{}
	spec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	for _, v := range spec["volumes"].([]any) {
		vol := v.(map[string]any)
		out[vol["name"].(string)] = vol["hostPath"].(map[string]any)["path"].(string)
	}
	return out
}

func container(ds map[string]any) map[string]any {
	spec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return spec["containers"].([]any)[0].(map[string]any)
}

// TestExplicitValuesWinOverProfiles: what a user sets wins over the
// platform's profile (upstream's chart lets the profile win unless the
// value is set under cni.*).
func TestExplicitValuesWinOverProfiles(t *testing.T) {
	objs := helmTemplate(t, "global.platform=k3s", "cniConfDir=/etc/my/net.d")
	if p := hostPaths(daemonSet(objs)); p["cni-net-dir"] != "/etc/my/net.d" || p["cni-bin-dir"] != "/var/lib/rancher/k3s/data/cni" {
		t.Errorf("k3s with cniConfDir set: %v", p)
	}
	objs = helmTemplate(t, "global.platform=gke", "cniBinDir=/opt/cni/bin", "resourceQuotas.enabled=false")
	if p := hostPaths(daemonSet(objs)); p["cni-bin-dir"] != "/opt/cni/bin" {
		t.Errorf("gke with cniBinDir set: %v", p)
	}
	if _, ok := objs["ResourceQuota istio-cni/istio-cni-node-critical"]; ok {
		t.Error("gke with resourceQuotas.enabled=false still renders the quota")
	}
	objs = helmTemplate(t, "global.platform=openshift", "chained=true", "istioOwnedCNIConfigFileName=01-istio-cni.conflist",
		"cniConfFileName=10-calico.conflist", "provider=default", "seLinuxOptions.level=s0")
	d := configData(objs)
	if d["CHAINED_CNI_PLUGIN"] != "true" || d["OWNED_CONFIG_NAME"] != "01-istio-cni.conflist" || d["PRIMARY_CONFIG_NAME"] != "10-calico.conflist" {
		t.Errorf("openshift made chained: %v", d)
	}
	if _, ok := objs["NetworkAttachmentDefinition default/istio-cni"]; ok {
		t.Error("provider=default still renders the NetworkAttachmentDefinition")
	}
	se := container(daemonSet(objs))["securityContext"].(map[string]any)["seLinuxOptions"]
	if fmt.Sprint(se) != "map[level:s0 type:spc_t]" {
		t.Errorf("seLinuxOptions %v, want the user's level with the profile's type", se)
	}
}

// TestUpstreamValueNames: upstream istio-cni's values do what they do
// there.
func TestUpstreamValueNames(t *testing.T) {
	objs := helmTemplate(t, "hub=registry.example/mesh", "tag=1.2", "pullPolicy=Always", "excludeNamespaces={kube-system,istio-system}",
		"logging.level=debug", "repair.repairPods=false", "repair.labelPods=true", "repair.brokenPodLabelKey=mesh/broken",
		"podLabels.team=net", "podAnnotations.note=x", "daemonSetLabels.tier=node", "priorityClassName=", "global.imagePullSecrets[0].name=pull",
		"env.AUDIT_INTERVAL=10s", "healthPort=18000", "seccompProfile.type=Unconfined")
	c := container(daemonSet(objs))
	if c["image"] != "registry.example/mesh/install-cni:1.2" || c["imagePullPolicy"] != "Always" {
		t.Errorf("image %v %v", c["image"], c["imagePullPolicy"])
	}
	d := configData(objs)
	for k, v := range map[string]string{"EXCLUDE_NAMESPACES": "kube-system,istio-system", "LOG_LEVEL": "debug", "AUDIT_ACTION": "label",
		"AUDIT_LABEL_KEY": "mesh/broken", "AUDIT_INTERVAL": "10s", "HEALTH_ADDR": ":18000"} {
		if d[k] != v {
			t.Errorf("ConfigMap %s = %v, want %s", k, d[k], v)
		}
	}
	for _, k := range []string{"ClusterRole <nil>/istio-cni-node-pod-writes", "ClusterRoleBinding <nil>/istio-cni-node-pod-writes"} {
		if _, ok := objs[k]; !ok {
			t.Errorf("repair.labelPods without %s", k)
		}
	}
	ds := daemonSet(objs)
	pod := ds["spec"].(map[string]any)["template"].(map[string]any)
	meta := pod["metadata"].(map[string]any)
	if meta["labels"].(map[string]any)["team"] != "net" || meta["annotations"].(map[string]any)["note"] != "x" ||
		ds["metadata"].(map[string]any)["labels"].(map[string]any)["tier"] != "node" {
		t.Errorf("pod labels/annotations or DaemonSet labels: %v %v", meta, ds["metadata"])
	}
	if _, ok := pod["spec"].(map[string]any)["priorityClassName"]; ok {
		t.Error("an empty priorityClassName is rendered")
	}
	sa := objs["ServiceAccount istio-cni/istio-cni"]
	if fmt.Sprint(sa["imagePullSecrets"]) != "[map[name:pull]]" {
		t.Errorf("imagePullSecrets %v", sa["imagePullSecrets"])
	}
	if probe := c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["port"]; fmt.Sprint(probe) != "18000" {
		t.Errorf("readiness probe port %v", probe)
	}
	if off := configData(helmTemplate(t, "repair.enabled=false"))["AUDIT_ACTION"]; off != "off" {
		t.Errorf("repair.enabled=false: AUDIT_ACTION %v", off)
	}
}

// TestMissedInjectionRestartGrantsPodWrites: restart sets the agent's
// setting and brings the pod writes, held to the node by their policy;
// report (the default) brings neither.
func TestMissedInjectionRestartGrantsPodWrites(t *testing.T) {
	for _, tc := range []struct {
		set, mode string
		writes    bool
	}{
		{"missedInjection.mode=report", "report", false},
		{"missedInjection.mode=restart,missedInjection.restartsPerMinute=2", "restart", true},
	} {
		objs := helmTemplate(t, tc.set)
		if got := configData(objs)["MISSED_INJECTION"]; got != tc.mode {
			t.Errorf("--set %s: MISSED_INJECTION %v, want %s", tc.set, got, tc.mode)
		}
		for _, name := range []string{"ClusterRole <nil>/istio-cni-node-pod-writes", "ValidatingAdmissionPolicy <nil>/istio-cni-node-pod-writes"} {
			if _, ok := objs[name]; ok != tc.writes {
				t.Errorf("--set %s: %s rendered %v, want %v", tc.set, name, ok, tc.writes)
			}
		}
	}
	if got := configData(helmTemplate(t, "missedInjection.restartsPerMinute=2"))["MISSED_INJECTION_RESTARTS_PER_MINUTE"]; got != "2" {
		t.Errorf("MISSED_INJECTION_RESTARTS_PER_MINUTE %v", got)
	}
}
