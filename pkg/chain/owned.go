package chain

import (
	"errors"
	"path/filepath"
	"strings"

	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// ErrOnlyEntry: removing istio-cni would leave a plugin list with no plugin,
// which no runtime accepts. The file is istio-cni's alone; delete it instead.
var ErrOnlyEntry = errors.New("istio-cni is the only plugin in the list")

// Owned builds the owned conflist from the primary: a .conf or .json (one
// plugin config) becomes a one-plugin list keeping "name" and "cniVersion";
// the primary's istio-cni entries are dropped (ours of any release, and
// upstream Istio's, which its installer keeps in the primary and may take
// out, with its binary, at any moment); our entry is appended, so it sees
// the primary's result. Then come the entries upstream's installer wrote
// into current, the file as it is now: it chains into the config that
// sorts first, ours when it starts after this one, and manages its entry
// there (at uninstall it takes it out before its binary); dropped, it
// would insert it again at once. Both plugins then run; upstream's finds
// the rules ours wrote and leaves them. Every other field is kept as the
// primary has it; a converted .conf also gets "loadOnlyInlinedPlugins":
// true (see fromConf). Output is deterministic: top-level keys sorted,
// two-space indent, final newline. Errors name the file and what is wrong.
func Owned(p *Primary, e pluginconf.Entry, current []byte) ([]byte, error) {
	c, err := parsePrimary(p)
	if err != nil {
		return nil, err
	}
	entry, err := renderEntry(e)
	if err != nil {
		return nil, err
	}
	c.dropEntries()
	c.plugins = append(c.plugins, plugin{typ: PluginType, raw: entry})
	c.plugins = append(c.plugins, upstreamEntries(current)...)
	return c.render()
}

// Inplace returns the content for inplace mode: Owned of the primary with
// the primary itself as the current file when keepUpstream (upstream's
// entries stay, after ours), written by the caller under InplaceName(p.Name)
// instead of a name of our own. Running it on its own output changes
// nothing, so a re-install over a file it already rewrote is a no-op.
func Inplace(p *Primary, e pluginconf.Entry, keepUpstream bool) ([]byte, error) {
	if !keepUpstream {
		return Owned(p, e, nil)
	}
	return Owned(p, e, p.Data)
}

// InplaceName is where Inplace's output goes: the primary itself for a
// .conflist. A .conf or .json primary becomes its name with ".conflist"
// ("10-bridge.conf" -> "10-bridge.conflist"), because runtimes parse every
// file but a .conflist as one plugin config, and a list there is invalid.
// That name sorts before the old one (".conf" is a prefix of ".conflist";
// 'c' < 'j'), so the caller writes it first and then removes the old file:
// the runtime sees the old chain, then the new one, never neither. The
// caller must refuse when the new name already holds some other file.
// renamed reports whether the name differs.
func InplaceName(primaryName string) (name string, renamed bool) {
	switch ext := filepath.Ext(primaryName); ext {
	case ".conf", ".json":
		return strings.TrimSuffix(primaryName, ext) + ".conflist", true
	}
	return primaryName, false
}

// WithoutOurEntry removes this installer's istio-cni entries from a config
// (uninstall) and renders the rest as Owned does; upstream Istio's entries
// (UpstreamEntry) stay: they are that installer's, which may manage the
// node now. data without such an entry (including a single plugin config
// of another type) is returned unchanged. A config holding nothing but our
// entry gives ErrOnlyEntry.
func WithoutOurEntry(data []byte) ([]byte, error) {
	m, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	if _, ok := m["plugins"]; !ok {
		if typ, _ := pluginType(data); (plugin{typ: typ, raw: data}).kind().ours() {
			return nil, ErrOnlyEntry
		}
		return data, nil
	}
	c, err := parseList(data)
	if err != nil {
		return nil, err
	}
	n := len(c.plugins)
	kept := c.plugins[:0:0]
	for _, p := range c.plugins {
		if !p.kind().ours() {
			kept = append(kept, p)
		}
	}
	if len(kept) == n {
		return data, nil
	}
	if len(kept) == 0 {
		return nil, ErrOnlyEntry
	}
	c.plugins = kept
	return c.render()
}
