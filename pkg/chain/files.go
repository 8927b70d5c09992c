package chain

import (
	"encoding/json"
	"fmt"
	"strings"
)

// HasEntry reports whether a config chains istio-cni (its plugin list holds
// an entry) or is istio-cni's standalone config.
func HasEntry(data []byte) bool {
	c, err := parseList(data)
	if err != nil {
		typ, _ := pluginType(data)
		return typ == PluginType
	}
	return c.hasEntry()
}

// Describe says what a config holds, for messages about who wrote it: its
// network's name and its plugins' types.
func Describe(data []byte) string {
	c, err := parseList(data)
	if err != nil {
		if c, err = fromConf(data); err != nil {
			return "not a CNI config"
		}
	}
	var name string
	_ = json.Unmarshal(c.fields["name"], &name)
	return fmt.Sprintf("network %q with plugins %s", name, strings.Join(c.types(), ", "))
}
