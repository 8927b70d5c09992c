package integration

import (
	"context"
	"encoding/json"
	"net"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// standaloneConf is the standalone config the installer writes for Multus
// (chain.Standalone), at the given CNI version, with the test's entry.
func standaloneConf(t *testing.T, v string) *libcni.PluginConfig {
	t.Helper()
	data, err := chain.Standalone(pluginconf.Entry{Kubeconfig: env.kubeconfig, ExcludeNamespaces: []string{"kube-system"},
		LogLevel: "debug", APITimeout: "3s", APIAttemptTimeout: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["cniVersion"] = v
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// TestMultusDelegate: istio-cni as Multus calls it on OpenShift, a
// standalone network (the installer's --chained=false config) run after
// the primary in the same namespace with its own interface name (net1)
// and no prevResult. For every CNI version it programs the same rules as
// chained, creates no interface, and returns a valid, empty result of the
// version asked for; CHECK and DEL work the same.
func TestMultusDelegate(t *testing.T) {
	for _, v := range version.All.SupportedVersions() {
		if v == "0.1.0" || v == "0.2.0" {
			continue // no chaining, no standalone delegate before 0.3.0
		}
		t.Run(v, func(t *testing.T) {
			ctx := context.Background()
			n, name := newNetwork(t), podName(t)
			ann, ctrs := meshed(nil)
			createPod(t, "team-a", name, ann, ctrs, nil)
			s := newSandbox(t, "team-a", name)
			mustAdd(t, n, s, conflist(t, n, v, nil)) // the primary, alone
			conf := standaloneConf(t, v)
			res, err := n.AddDelegate(ctx, s, conf, "net1")
			if err != nil {
				t.Fatalf("ADD as a delegate: %v", err)
			}
			t.Cleanup(func() { _ = n.DelDelegate(context.Background(), s, conf, "net1") })
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			if out, _ := json.Marshal(res); len(out) == 0 || string(out) != emptyResult(t, v) {
				t.Errorf("result %s, want the empty result of %s", out, v)
			}
			if err := s.NetNS().Do(func(ns.NetNS) error {
				_, err := net.InterfaceByName("net1")
				return err
			}); err == nil {
				t.Error("the delegate created net1")
			}
			assertRules(t, s.Path(), autoWriter, iptables.DefaultSpec(), true)
			if v != "0.3.0" && v != "0.3.1" {
				if err := n.CheckDelegate(ctx, s, conf, "net1"); err != nil {
					t.Errorf("CHECK as a delegate: %v", err)
				}
			}
			if err := n.DelDelegate(ctx, s, conf, "net1"); err != nil {
				t.Fatalf("DEL as a delegate: %v", err)
			}
			assertNoRules(t, s.Path(), autoWriter)
		})
	}
}

// emptyResult is what a plugin with no prevResult prints at version v.
func emptyResult(t *testing.T, v string) string {
	t.Helper()
	r, err := version.NewResult(v, []byte(`{"cniVersion":"`+v+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
