package chain

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// Extensions are the file extensions runtimes read CNI configs from.
var Extensions = []string{".conf", ".conflist", ".json"}

// IsConfigName reports whether runtimes would read a file of this name.
func IsConfigName(name string) bool {
	ext := filepath.Ext(name)
	for _, e := range Extensions {
		if ext == e {
			return true
		}
	}
	return false
}

// ConfigFiles lists the CNI config files in dir by base name, sorted the
// way runtimes sort them (libcni.ConfFiles, then lexical order), hidden
// names included: runtimes read those too.
func ConfigFiles(dir string) ([]string, error) {
	paths, err := libcni.ConfFiles(dir, Extensions)
	if err != nil {
		return nil, fmt.Errorf("listing CNI config dir %s: %w", dir, err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	sort.Strings(names)
	return names, nil
}

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
