package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"istio-cni.local/istio-cni/pkg/iptables/release"
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
	// backendIPv6 is IPv6's backend where a recorded sandbox's IPv6
	// rules are not in IPv4's (withWriterOf): the record's, or the
	// entry's for a record before version 3, which names IPv4's only;
	// "" for parsed.Backend.
	backendIPv6 release.Backend
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
