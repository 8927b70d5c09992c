// Package chain is the installer's pure logic for the node's CNI config
// directory: which file the runtime uses (FindPrimary), the conflist that
// chains istio-cni after it (Owned, Inplace), the name our own file needs to
// win the runtime's lexical pick (OwnedName), and the checks that it still
// does (Verify). Nothing here reads or writes the disk: it decides from a
// Dir, the directory as the installer read it.
//
// It sits at the top of pkg/, beside pkg/iptables, rather than under
// pkg/nodeagent: the design keeps the two models (a pod's rules, the node's
// conflist) where both sides and their tests can read them, though only
// the node agent writes conflists (docs/architecture.md).
package chain

import (
	"fmt"

	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// PluginType is istio-cni's "type" in a plugin list, and so its binary's
// name in the CNI bin directory: a name upstream Istio's istio-cni never
// writes or removes. Upstream's installer copies its own binary over
// <bin dir>/istio-cni on every pass, and its shutdown deletes that binary
// and any entry of that type, whoever wrote them; under a name of its own
// this one installs beside it, and a switch either way leaves no moment
// without a working plugin (docs/migration.md).
const PluginType = "istio-cni-sidecar"

// LegacyType is the type this project's releases wrote before PluginType,
// and the one upstream Istio's installer writes: an entry of it is ours
// when it lacks every key only upstream's carries (upstreamEntry).
const LegacyType = "istio-cni"

// entryJSON is the entry as written: its type and capabilities first, then
// its keys.
type entryJSON struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	pluginconf.Entry
}

// capabilities asks the runtime for the pod's annotations
// (io.kubernetes.cri.pod-annotations, passed by containerd 1.5+ and CRI-O):
// a pod without the injector's sidecar.istio.io/status annotation is then
// passed through with no lookup and no credential, so a node whose agent is
// away for good still starts plain pods.
func capabilities() map[string]bool {
	return map[string]bool{pluginconf.PodAnnotationsCapability: true}
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
	return marshal(entryJSON{Type: PluginType, Capabilities: capabilities(), Entry: e}, "")
}

func entryError(err error) error { return fmt.Errorf("istio-cni entry: %w", err) }
