package chain

import (
	"encoding/json"
	"fmt"
	"strings"
)

// HasEntry reports whether a config chains this project's istio-cni (its
// plugin list holds an entry of ours, of any release) or is its standalone
// config; upstream Istio's entries do not count (UpstreamEntry).
func HasEntry(data []byte) bool {
	c, err := parseList(data)
	if err != nil {
		typ, _ := pluginType(data)
		return (plugin{typ: typ, raw: data}).kind().ours()
	}
	return c.hasEntry()
}

// HasLegacyEntry reports whether a config holds, at any depth (a
// Multus config nests its delegates' plugins), an entry an earlier
// release of this project wrote (its type, LegacyType, upstream's too):
// that release's binary is still needed while one does. A file that does
// not parse as JSON may hold one: true.
func HasLegacyEntry(data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return true
	}
	return legacyIn(v)
}

func legacyIn(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if v["type"] == LegacyType {
			upstream := false
			for _, k := range upstreamKeys {
				_, upstream = v[k]
				if upstream {
					break
				}
			}
			if !upstream {
				return true
			}
		}
		for _, x := range v {
			if legacyIn(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if legacyIn(x) {
				return true
			}
		}
	}
	return false
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
