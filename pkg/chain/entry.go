// Package chain is the installer's pure logic for the node's CNI config
// directory: which file the runtime uses (FindPrimary), the conflist that
// chains istio-cni after it (Owned, Inplace), the name our own file needs to
// win the runtime's lexical pick (OwnedName), and the checks that it still
// does (Verify). Only FindPrimary reads the disk; nothing here writes.
package chain

import (
	"fmt"
	"path/filepath"
	"strings"

	"istio-cni.local/istio-cni/pkg/kube"
)

// PluginType is istio-cni's "type" in a plugin list.
const PluginType = "istio-cni"

// Entry is istio-cni's plugin entry in the chain.
type Entry struct {
	Kubeconfig        string // host path of the plugin's kubeconfig
	ExcludeNamespaces []string
	AgentNamespace    string // "" to omit
	LogLevel          string // "" to omit
	AgentSocket       string // host path of the agent's event socket; "" to omit
}

// entryJSON is the entry as the plugin reads it (pkg/plugin.Config). Field
// order here is the order in the file.
type entryJSON struct {
	Type              string   `json:"type"`
	Kubeconfig        string   `json:"kubeconfig"`
	ExcludeNamespaces []string `json:"exclude_namespaces"`
	AgentNamespace    string   `json:"agent_namespace,omitempty"`
	LogLevel          string   `json:"log_level,omitempty"`
	AgentSocket       string   `json:"agent_socket,omitempty"`
}

// render validates e and returns its compact JSON. The checks mirror the
// plugin's parseConfig: a value the plugin would reject would fail every
// pod's ADD on the node, so it fails the install instead.
func (e Entry) render() ([]byte, error) {
	if !filepath.IsAbs(e.Kubeconfig) {
		return nil, entryError("kubeconfig", fmt.Sprintf("%q is not an absolute path: want the kubeconfig's path on the host", e.Kubeconfig))
	}
	for _, ns := range e.ExcludeNamespaces {
		if !kube.ValidNamespace(ns) {
			return nil, entryError("exclude_namespaces", notNamespace(ns))
		}
	}
	if e.AgentNamespace != "" && !kube.ValidNamespace(e.AgentNamespace) {
		return nil, entryError("agent_namespace", notNamespace(e.AgentNamespace))
	}
	switch strings.ToLower(e.LogLevel) {
	case "", "debug", "info", "warn", "warning", "error":
	default:
		return nil, entryError("log_level", fmt.Sprintf("unknown level %q: want debug, info, warn or error", e.LogLevel))
	}
	if e.AgentSocket != "" && !filepath.IsAbs(e.AgentSocket) {
		return nil, entryError("agent_socket", fmt.Sprintf("%q is not an absolute path: want the agent's socket path on the host, or empty", e.AgentSocket))
	}
	ex := e.ExcludeNamespaces
	if ex == nil {
		ex = []string{} // always an array: the plugin and humans read [] as "none"
	}
	return marshal(entryJSON{
		Type:              PluginType,
		Kubeconfig:        e.Kubeconfig,
		ExcludeNamespaces: ex,
		AgentNamespace:    e.AgentNamespace,
		LogLevel:          e.LogLevel,
		AgentSocket:       e.AgentSocket,
	}, "")
}

func entryError(field, problem string) error {
	return fmt.Errorf("istio-cni entry: field %q: %s", field, problem)
}

func notNamespace(s string) string {
	return fmt.Sprintf("%q is not a namespace name: want 1 to 63 lower-case letters, digits and '-'", s)
}
