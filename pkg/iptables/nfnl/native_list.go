package nfnl

import (
	"fmt"

	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// ListNative lists our tables in the calling thread's network namespace
// as the kernel holds them, for people (inspect): each table, its chains
// in the kernel's order with their hooks, and each rule by the text of
// the rule of rs it encodes as, or by its handle when rs has none such.
// No nft is needed: rules are named by the model, not decoded.
func ListNative(rs *nftables.Ruleset) ([]string, error) {
	want, held, err := plannedAndHeld(rs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range nftables.Tables {
		h := held[name]
		if h == nil {
			continue
		}
		out = append(out, "table inet "+name)
		texts := map[string][]string{} // by chain, then encoding
		if w := want[name]; w != nil {
			for _, wc := range w.chains {
				for _, r := range wc.rules {
					texts[wc.Name+"\x00"+r.canon()] = append(texts[wc.Name+"\x00"+r.canon()], r.text)
				}
			}
		}
		for _, hc := range h.chains {
			head := "  chain " + hc.name
			if hc.base != "" {
				head += " { " + hc.base + " }"
			}
			out = append(out, head)
			for _, r := range hc.rules {
				key := hc.name + "\x00" + h.canon(r)
				if t := texts[key]; len(t) > 0 {
					out = append(out, "    "+t[0])
					texts[key] = t[1:]
					continue
				}
				out = append(out, fmt.Sprintf("    (a rule the model does not hold, handle %d)", r.handle))
			}
		}
	}
	return out, nil
}
