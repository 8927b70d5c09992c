package chain

import (
	"encoding/json"

	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// Standalone configs: where the runtime's CNI is Multus (OpenShift, or any
// cluster whose pods get extra networks), istio-cni is not chained after
// the primary. It is a network of its own, a one-plugin config (.conf) that
// Multus calls as a delegate for the pods whose NetworkAttachmentDefinition
// names it, after the primary ran in the same namespace.
const (
	// StandaloneNetwork is the config's "name": Multus finds the file by
	// it for the NetworkAttachmentDefinition of the same name.
	StandaloneNetwork = "istio-cni"
	// StandaloneVersion is its "cniVersion": the oldest the plugin speaks
	// that every Multus release accepts; the plugin answers in the version
	// it is called with.
	StandaloneVersion = "0.3.1"
)

// standaloneJSON is the config as written: the CNI fields, then the entry.
type standaloneJSON struct {
	CNIVersion   string          `json:"cniVersion"`
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	pluginconf.Entry
}

// Standalone is istio-cni's standalone config for the entry, validated as
// the plugin will, two-space indented with a final newline.
func Standalone(e pluginconf.Entry) ([]byte, error) {
	if _, err := renderEntry(e); err != nil {
		return nil, err
	}
	if e.ExcludeNamespaces == nil {
		e.ExcludeNamespaces = []string{}
	}
	return marshal(standaloneJSON{CNIVersion: StandaloneVersion, Name: StandaloneNetwork, Type: PluginType, Capabilities: capabilities(), Entry: e}, "  ")
}

// upstreamKeys are keys only upstream istio-cni's installer writes into
// its entry: cni_agent_run_dir and the others since Istio 1.24, the
// "kubernetes" object before.
var upstreamKeys = []string{"cni_agent_run_dir", "plugin_log_level", "pod_namespace", "ambient_enabled", "kubernetes"}

// UpstreamEntry reports whether a config holds an istio-cni entry written
// by upstream Istio's installer rather than this one: that installer is
// (or was) on the node too.
func UpstreamEntry(data []byte) bool {
	if c, err := parseList(data); err == nil {
		for _, p := range c.plugins {
			if p.kind() == upstreamEntryKind {
				return true
			}
		}
		return false
	}
	typ, _ := pluginType(data)
	return (plugin{typ: typ, raw: data}).kind() == upstreamEntryKind
}

// upstreamEntry: one istio-cni entry carries a key only upstream's
// installer writes.
func upstreamEntry(raw []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, k := range upstreamKeys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}
