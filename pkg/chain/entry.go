// Package chain is the installer's pure logic for the node's CNI config
// directory: which file the runtime uses (FindPrimary), the conflist that
// chains istio-cni after it (Owned, Inplace), the name our own file needs to
// win the runtime's lexical pick (OwnedName), and the checks that it still
// does (Verify). Only FindPrimary reads the disk; nothing here writes.
package chain

import (
	"fmt"

	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// PluginType is istio-cni's "type" in a plugin list.
const PluginType = "istio-cni"

// entryJSON is the entry as written: its type first, then its keys.
type entryJSON struct {
	Type string `json:"type"`
	pluginconf.Entry
}

// renderEntry validates e exactly as the plugin will (pluginconf) and
// returns its compact JSON: a value the plugin would reject would fail
// every pod's ADD on the node, so it fails the install instead.
func renderEntry(e pluginconf.Entry) ([]byte, error) {
	if e.Kubeconfig == "" {
		return nil, entryError(&pluginconf.FieldError{Field: "kubeconfig", Problem: "required: want the kubeconfig's path on the host"})
	}
	if _, err := e.Normalize(); err != nil {
		return nil, entryError(err)
	}
	if e.ExcludeNamespaces == nil {
		e.ExcludeNamespaces = []string{} // always an array: the plugin and humans read [] as "none"
	}
	return marshal(entryJSON{Type: PluginType, Entry: e}, "")
}

func entryError(err error) error { return fmt.Errorf("istio-cni entry: %w", err) }
