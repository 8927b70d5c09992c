package chain_test

import (
	"errors"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// TestOwnedPreserves: fields we do not own come out as the primary wrote
// them: unknown keys, integers beyond float64, string escapes, '<' and '&'.
func TestOwnedPreserves(t *testing.T) {
	p := &chain.Primary{Name: "10-x.conflist", Data: []byte(`{"name":"n","cniVersion":"1.0.0","disableCheck":"true","x-vendor":{"b":1,"a":2},
		"plugins":[{"type":"x","big":18446744073709551615,"f":1.50,"s":"caf\u00e9 <a&b>","z":null,"a":[]}]}`)}
	got, err := chain.Owned(p, pluginconf.Entry{Kubeconfig: "/k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"big": 18446744073709551615`, `"f": 1.50`, `"s": "caf\u00e9 <a&b>"`, `"z": null`, `"a": []`,
		`"disableCheck": "true"`, "\"x-vendor\": {\n    \"b\": 1,\n    \"a\": 2\n  }",
		`"exclude_namespaces": []`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	for _, absent := range []string{"agent_namespace", "log_level", "reports_socket", "loadOnlyInlinedPlugins"} {
		if strings.Contains(string(got), absent) {
			t.Errorf("output has %s:\n%s", absent, got)
		}
	}
	if !strings.HasSuffix(string(got), "}\n") {
		t.Errorf("output does not end in a newline")
	}
}

// TestOwnedNamelessConf: libcni's conversion gives a list named "", and
// loadOnlyInlinedPlugins keeps libcni >= 1.3 from reading every .conf in
// the config dir as that network's plugins.
func TestOwnedNamelessConf(t *testing.T) {
	got, err := chain.Owned(&chain.Primary{Name: "10-b.conf", Data: []byte(`{"type":"bridge"}`)}, testEntry, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name": ""`, `"cniVersion": ""`, `"loadOnlyInlinedPlugins": true`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	checkLibcni(t, got)
}

func TestOwnedErrors(t *testing.T) {
	ok := `{"name":"n","plugins":[{"type":"x"}]}`
	for _, tc := range []struct {
		name, data string
		e          pluginconf.Entry
		want       string
	}{
		{"10-x.yaml", ok, testEntry, "10-x.yaml: want a name ending in .conflist, .conf or .json"},
		{"10-x.conf", ok, testEntry, "10-x.conf: error parsing configuration: missing 'type'"},
		{"10-x.conflist", `{"type":"bridge","name":"n"}`, testEntry, `10-x.conflist: no "plugins" list`},
		{"10-x.conflist", `{"name":"n","plugins":[{"type":"x"},{"type":1}]}`, testEntry, "10-x.conflist: failed to parse plugin config 1"},
		{"10-x.conflist", `[1]`, testEntry, "10-x.conflist: error parsing configuration list"},
		{"10-x.conflist", ok, pluginconf.Entry{Kubeconfig: "kubeconfig"}, `istio-cni entry: field "kubeconfig": "kubeconfig" is not an absolute path`},
		{"10-x.conflist", ok, pluginconf.Entry{Kubeconfig: "/k", ExcludeNamespaces: []string{"Kube"}}, `field "exclude_namespaces": "Kube" is not a namespace name`},
		{"10-x.conflist", ok, pluginconf.Entry{Kubeconfig: "/k", LogLevel: "loud"}, `field "log_level": unknown level "loud": want debug, info, warn or error`},
		{"10-x.conflist", ok, pluginconf.Entry{Kubeconfig: "/k", ReportsSocket: "reports.sock"}, `field "reports_socket": "reports.sock" is not an absolute path`},
	} {
		_, err := chain.Owned(&chain.Primary{Name: tc.name, Data: []byte(tc.data)}, tc.e, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Owned(%s, %s) err = %v, want %q", tc.name, tc.data, err, tc.want)
		}
	}
}

// TestOwnedAgentSocket: a set reports_socket comes right after log_level, and
// Verify tells an entry without it from one with it.
func TestOwnedAgentSocket(t *testing.T) {
	p := loadPrimary(t, "10-flannel.conflist")
	e := testEntry
	e.ReportsSocket = "/var/run/istio-cni/reports.sock"
	got, err := chain.Owned(p, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `"log_level": "info",` + "\n" + `      "reports_socket": "/var/run/istio-cni/reports.sock"` + "\n"
	if !strings.Contains(string(got), want) {
		t.Errorf("output lacks %q:\n%s", want, got)
	}
	checkLibcni(t, got)
	if err := chain.Verify(got, p, e, true); err != nil {
		t.Errorf("Verify with the socket: %v", err)
	}
	if err := chain.Verify(got, p, testEntry, true); err == nil || !strings.Contains(err.Error(), `field "reports_socket"`) {
		t.Errorf("Verify against an entry without the socket: %v", err)
	}
}

func TestWithoutOurEntry(t *testing.T) {
	p := loadPrimary(t, "10-flannel.conflist")
	inplace, err := chain.Inplace(p, testEntry, true)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := chain.WithoutOurEntry(inplace)
	if err != nil {
		t.Fatal(err)
	}
	if err := chain.Verify(inplace, &chain.Primary{Name: p.Name, Data: restored}, testEntry, true); err != nil {
		t.Errorf("WithoutOurEntry lost more than the entry: %v", err)
	}
	if strings.Contains(string(restored), chain.PluginType) {
		t.Errorf("entry left:\n%s", restored)
	}
	again, err := chain.WithoutOurEntry(restored)
	if err != nil || string(again) != string(restored) {
		t.Errorf("second WithoutOurEntry changed the bytes: %v", err)
	}
	// Upstream Istio's entries are its installer's: never ours to remove.
	upstreamList := `{"name":"n","plugins":[{"type":"bridge"},{"type":"istio-cni","cni_agent_run_dir":"/var/run/istio-cni"}]}`
	upstreamOld := `{"type":"istio-cni","kubernetes":{"kubeconfig":"/etc/cni/net.d/ZZZ-istio-cni-kubeconfig"}}`
	for _, unchanged := range []string{string(p.Data), `{"type":"bridge","name":"n"}`, upstreamList, upstreamOld} {
		if got, err := chain.WithoutOurEntry([]byte(unchanged)); err != nil || string(got) != unchanged {
			t.Errorf("WithoutOurEntry(%.30s) = %.30s, %v; want it unchanged", unchanged, got, err)
		}
	}
	for _, only := range []string{`{"name":"n","plugins":[{"type":"istio-cni"}]}`, `{"type":"istio-cni"}`} {
		if _, err := chain.WithoutOurEntry([]byte(only)); !errors.Is(err, chain.ErrOnlyEntry) {
			t.Errorf("WithoutOurEntry(%s) err = %v, want ErrOnlyEntry", only, err)
		}
	}
	if _, err := chain.WithoutOurEntry([]byte("garbage")); err == nil {
		t.Error("WithoutOurEntry(garbage): no error")
	}
}
