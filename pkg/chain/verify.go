package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// Verify reports why ownedData is not what Owned produces from p and e,
// with the upstream entries ownedData holds when keepUpstream, compared as
// JSON values (key order and whitespace do not count), or nil. It names
// the first difference: the plugin types in order, then the first plugin
// field, then the first top-level field.
func Verify(ownedData []byte, p *Primary, e pluginconf.Entry, keepUpstream bool) error {
	current := ownedData
	if !keepUpstream {
		current = nil
	}
	wantData, err := Owned(p, e, current)
	if err != nil {
		return fmt.Errorf("cannot build the expected chain: %w", err)
	}
	want, err := parseList(wantData)
	if err != nil {
		return fmt.Errorf("cannot build the expected chain: %w", err)
	}
	got, err := parseList(ownedData)
	if err != nil {
		return fmt.Errorf("not a valid plugin list: %w", err)
	}
	if err := diffLists(got, want); err != nil {
		return fmt.Errorf("not %s with istio-cni chained: %w", p.Name, err)
	}
	return nil
}

func diffLists(got, want *conflist) error {
	gt, wt := got.types(), want.types()
	if !slices.Equal(gt, wt) {
		hint := ""
		if !got.hasEntry() {
			hint = "the istio-cni entry is missing; "
		}
		return fmt.Errorf("%splugin types are [%s], want [%s]", hint, strings.Join(gt, " "), strings.Join(wt, " "))
	}
	for i := range got.plugins {
		g, err := parseObject(got.plugins[i].raw)
		if err != nil {
			return fmt.Errorf("plugins[%d]: %w", i, err)
		}
		w, err := parseObject(want.plugins[i].raw)
		if err != nil {
			return fmt.Errorf("plugins[%d]: %w", i, err)
		}
		if d := diffFields(g, w); d != "" {
			return fmt.Errorf("plugins[%d] (%s): %s", i, got.plugins[i].typ, d)
		}
	}
	if d := diffFields(got.fields, want.fields); d != "" {
		return fmt.Errorf("top level: %s", d)
	}
	return nil
}

// diffFields describes the first differing key in sorted order, or "".
func diffFields(got, want map[string]json.RawMessage) string {
	keys := slices.Collect(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, inGot := got[k]
		w, inWant := want[k]
		switch {
		case !inGot:
			return fmt.Sprintf("field %q is missing, want %s", k, short(w))
		case !inWant:
			return fmt.Sprintf("field %q = %s is not in the primary", k, short(g))
		case !bytes.Equal(canonical(g), canonical(w)):
			return fmt.Sprintf("field %q = %s, want %s", k, short(g), short(w))
		}
	}
	return ""
}

// canonical re-encodes a JSON value with sorted keys and compact spacing;
// numbers keep their text (no float64 rounding of large integers).
func canonical(raw json.RawMessage) []byte {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return raw
	}
	out, err := marshal(v, "")
	if err != nil {
		return raw
	}
	return out
}

func short(raw json.RawMessage) string {
	s := string(canonical(raw))
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
