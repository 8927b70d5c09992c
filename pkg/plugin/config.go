package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// Config is the plugin's entry in the conflist: the CNI fields and
// istio-cni's own keys (pluginconf.Entry). Unknown fields are ignored.
type Config struct {
	types.NetConf
	pluginconf.Entry
	// RuntimeConfig is what the runtime passed for the entry's
	// capabilities: the pod's annotations.
	RuntimeConfig pluginconf.RuntimeConfig `json:"runtimeConfig"`

	// parsed is the entry's values, validated, with defaults.
	parsed pluginconf.Values
}

// writer is how the entry writes a sandbox's rules now: native nftables,
// or iptables in its backend (auto: where the node's programs lead).
func (c *Config) writer() applied.Writer {
	return applied.Writer{Backend: c.parsed.Backend, Native: c.parsed.Native}
}

// nodeWriter is writer with its iptables backend resolved, family by
// family, to where the node's programs lead (release.Backend.Resolve), as
// ADD records it: where a sandbox no record names a backend for is looked
// in first (an auto guess has no other backend to look in), and what a
// repeated ADD compares the earlier one's record with. Native keeps it
// for iptables records. Programs that cannot be found leave IPv4's as
// the entry says, and IPv6's as IPv4's.
func (c *Config) nodeWriter() applied.Writer {
	w := c.writer()
	if b, err := c.parsed.Backend.Resolve(false); err == nil {
		w.Backend = b
	}
	if b6, err := c.parsed.Backend.Resolve(true); err == nil && b6 != w.Backend {
		w.BackendIPv6 = b6
	}
	return w
}

const errPrefix = "istio-cni config"

// parseConfig reads and validates the plugin's configuration and prevResult.
// The entry's keys are validated by pluginconf, the installer's check too.
func parseConfig(stdin []byte) (*Config, error) {
	conf := Config{}
	if err := json.Unmarshal(stdin, &conf); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalid(strings.TrimPrefix(te.Field, "Entry."), fmt.Sprintf("got JSON %s, want %s", te.Value, jsonKind(te.Type.Kind().String())))
		}
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: decoding: %v", errPrefix, err), "")
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("%s: prevResult: %v", errPrefix, err), "")
	}
	var err error
	if conf.parsed, err = conf.Normalize(); err != nil {
		var fe *pluginconf.FieldError
		if errors.As(err, &fe) {
			return nil, invalid(fe.Field, fe.Problem)
		}
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: %v", errPrefix, err), "")
	}
	return &conf, nil
}

func invalid(field, problem string) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("%s: field %q: %s", errPrefix, field, problem), "")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "slice":
		return "an array of strings"
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	}
	return goKind
}
