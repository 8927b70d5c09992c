package chain

import "strings"

// primaryHints name, per primary CNI known to rewrite the configuration
// directory on its own, the setting that stops it, keyed by its plugin's
// type: what an operator needs when another writer keeps undoing ours.
var primaryHints = map[string]string{
	// Cilium's agent removes every other config it finds while
	// cni.exclusive is true (its default in most installs).
	"cilium-cni": "Cilium takes over the CNI config directory while cni.exclusive is true: set cni.exclusive=false in Cilium's Helm values (exclusive-cni-conf: \"false\" in its ConfigMap cilium-config) and restart its agents",
}

// FightHint is the setting that stops a known primary (named, with its
// config's data) from fighting ours, or "": the primary's plugin types,
// else (a config that does not parse) its file name.
func FightHint(name string, data []byte) string {
	c, err := parseList(data)
	if err != nil {
		c, err = fromConf(data)
	}
	if err == nil {
		for _, t := range c.types() {
			if h, ok := primaryHints[t]; ok {
				return h
			}
		}
	}
	for t, h := range primaryHints {
		if strings.Contains(name, strings.TrimSuffix(t, "-cni")) {
			return h
		}
	}
	return ""
}
