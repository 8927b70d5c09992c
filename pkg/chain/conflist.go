package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

// conflist is a plugin list kept as raw JSON, so that every field we do not
// touch (unknown keys, large numbers, string escapes) is written back as the
// primary had it.
type conflist struct {
	fields  map[string]json.RawMessage // top-level fields except "plugins"
	plugins []plugin
}

type plugin struct {
	typ string
	raw json.RawMessage
}

// entryKind says whose istio-cni entry a plugin is, if any.
type entryKind int

const (
	notEntry          entryKind = iota
	ourEntry                    // this release's (PluginType)
	legacyEntry                 // an earlier release's of this project (LegacyType)
	upstreamEntryKind           // upstream Istio's installer's (LegacyType, its keys)
)

func (p plugin) kind() entryKind {
	switch {
	case p.typ == PluginType:
		return ourEntry
	case p.typ != LegacyType:
		return notEntry
	case upstreamEntry(p.raw):
		return upstreamEntryKind
	}
	return legacyEntry
}

// ours: an entry this project wrote, this release or an earlier one.
func (k entryKind) ours() bool { return k == ourEntry || k == legacyEntry }

// isListFile reports how runtimes read a file: containerd (go-cni), CRI-O
// (ocicni) and libcni's own loaders parse only a .conflist as a plugin list,
// and a .conf or .json as one plugin config.
func isListFile(name string) (bool, error) {
	switch filepath.Ext(name) {
	case ".conflist":
		return true, nil
	case ".conf", ".json":
		return false, nil
	}
	return false, fmt.Errorf("%s: want a name ending in .conflist, .conf or .json (the runtime reads no other file)", name)
}

// parsePrimary checks p the way the runtime would (libcni's parsers), then
// reads it as a list; a single plugin config becomes a one-plugin list.
// Errors start with the file's name.
func parsePrimary(p *Primary) (*conflist, error) {
	list, err := isListFile(p.Name)
	if err != nil {
		return nil, err
	}
	var c *conflist
	if list {
		if _, err = libcni.NetworkConfFromBytes(p.Data); err == nil {
			c, err = parseList(p.Data)
		}
	} else if _, err = libcni.NetworkPluginConfFromBytes(p.Data); err == nil {
		c, err = fromConf(p.Data)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	return c, nil
}

func parseObject(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if m == nil {
		return nil, errors.New("not a JSON object: null")
	}
	return m, nil
}

// parseList reads a plugin list. It wants what libcni wants of an inline
// list: a string "name", a non-empty "plugins" array of objects with a type.
func parseList(data []byte) (*conflist, error) {
	m, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	var name *string
	if err := json.Unmarshal(m["name"], &name); err != nil || name == nil {
		return nil, errors.New(`field "name": want a string`)
	}
	rawPlugins, ok := m["plugins"]
	if !ok {
		return nil, errors.New(`no "plugins" list (one plugin config belongs in a .conf file)`)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(rawPlugins, &raws); err != nil {
		return nil, errors.New(`field "plugins": want an array of plugin configs`)
	}
	if len(raws) == 0 {
		return nil, errors.New(`field "plugins": empty; want at least one plugin config`)
	}
	delete(m, "plugins")
	c := &conflist{fields: m}
	for i, raw := range raws {
		typ, err := pluginType(raw)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		c.plugins = append(c.plugins, plugin{typ: typ, raw: raw})
	}
	return c, nil
}

func pluginType(raw json.RawMessage) (string, error) {
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("want a plugin config object with a string \"type\": %w", err)
	}
	if p.Type == "" {
		return "", errors.New(`field "type": missing; want the plugin's binary name`)
	}
	return p.Type, nil
}

// fromConf converts one plugin config to a one-plugin list as libcni's
// ConfListFromConf does (the list takes "name" and "cniVersion", "" when
// absent), plus loadOnlyInlinedPlugins: a list file, unlike a .conf, also
// gets plugins from the directory <confdir>/<name>/ in libcni >= 1.3, and a
// nameless .conf would make that the config dir itself.
func fromConf(data []byte) (*conflist, error) {
	var conf struct {
		Name       string `json:"name"`
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, fmt.Errorf(`fields "name" and "cniVersion": want strings: %w`, err)
	}
	typ, err := pluginType(data)
	if err != nil {
		return nil, err
	}
	name, err := marshal(conf.Name, "")
	if err != nil {
		return nil, err
	}
	version, err := marshal(conf.CNIVersion, "")
	if err != nil {
		return nil, err
	}
	return &conflist{
		fields: map[string]json.RawMessage{
			"name":                   name,
			"cniVersion":             version,
			"loadOnlyInlinedPlugins": json.RawMessage("true"),
		},
		plugins: []plugin{{typ: typ, raw: json.RawMessage(data)}},
	}, nil
}

// dropEntries removes every istio-cni plugin, ours of any release and
// upstream's, and reports how many.
func (c *conflist) dropEntries() int {
	n := len(c.plugins)
	kept := c.plugins[:0:0]
	for _, p := range c.plugins {
		if p.kind() == notEntry {
			kept = append(kept, p)
		}
	}
	c.plugins = kept
	return n - len(kept)
}

// hasEntry: the list holds an entry of ours, of any release.
func (c *conflist) hasEntry() bool {
	for _, p := range c.plugins {
		if p.kind().ours() {
			return true
		}
	}
	return false
}

// upstreamEntries are the list's entries upstream's installer wrote, in
// order; none when data is not a plugin list.
func upstreamEntries(data []byte) []plugin {
	c, err := parseList(data)
	if err != nil {
		return nil
	}
	var out []plugin
	for _, p := range c.plugins {
		if p.kind() == upstreamEntryKind {
			out = append(out, p)
		}
	}
	return out
}

func (c *conflist) types() []string {
	out := make([]string, len(c.plugins))
	for i, p := range c.plugins {
		out[i] = p.typ
	}
	return out
}

// render writes c deterministically: top-level keys sorted, plugins in
// order, each plugin's keys as they were, two-space indent, final newline.
func (c *conflist) render() ([]byte, error) {
	raws := make([]json.RawMessage, len(c.plugins))
	for i, p := range c.plugins {
		raws[i] = p.raw
	}
	plugins, err := marshal(raws, "")
	if err != nil {
		return nil, err
	}
	out := maps.Clone(c.fields)
	out["plugins"] = plugins
	return marshal(out, "  ")
}

// marshal encodes v without HTML escaping ('<' in a path stays '<'); with
// indent "" the result is compact and has no newline.
func marshal(v any, indent string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if indent == "" {
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
	}
	return b.Bytes(), nil
}
