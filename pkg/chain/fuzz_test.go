package chain_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"istio-cni.local/istio-cni/pkg/chain"
)

// The primary's config is foreign input, written by whatever CNI the node
// runs: whatever it holds, choosing the primary never panics, and a
// conflist built from it is one the runtime parses, holding our entry last.
func FuzzOwnedFromAnyPrimary(f *testing.F) {
	for _, seed := range []string{calicoList, bridgeConf, ownedList, `{"name":"n","plugins":[]}`, `null`, `{"plugins":[{"type":1}]}`} {
		f.Add("10-x.conflist", seed)
		f.Add("10-x.conf", seed)
	}
	f.Fuzz(func(t *testing.T, name, data string) {
		d := dirOf(map[string]string{name: data})
		p, err := chain.FindPrimary(d, preferred)
		if err != nil {
			return
		}
		out, err := chain.Owned(p, testEntry, nil)
		if err != nil {
			return
		}
		list, err := libcni.NetworkConfFromBytes(out)
		if err != nil {
			t.Fatalf("Owned(%q) = %s, which the runtime cannot parse: %v", data, out, err)
		}
		var last map[string]any
		if err := json.Unmarshal(list.Plugins[len(list.Plugins)-1].Bytes, &last); err != nil || last["type"] != chain.PluginType {
			t.Fatalf("Owned(%q): the last plugin is not ours: %s", data, out)
		}
		if _, err := chain.WithoutOurEntry(out); err != nil && !errors.Is(err, chain.ErrOnlyEntry) {
			t.Fatalf("WithoutOurEntry(Owned(%q)): %v", data, err)
		}
	})
}
