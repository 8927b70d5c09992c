package applied

import (
	"encoding/json"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// header is what every version of a record holds, with the same meaning.
// Passed belongs to it: a sandbox ADD passed through is one no build
// programmed, so an older agent leaves it alone as it leaves its own.
// format_test.go freezes it apart from any version.
type header struct {
	Version    int    `json:"version"`
	PodUID     string `json:"podUID"`
	Pod        string `json:"pod"`
	Container  string `json:"container"`
	NetnsInode uint64 `json:"netnsInode"`
	Passed     bool   `json:"passed,omitempty"`
}

// decode reads a record that this plugin, or a later build of it, could
// have written: a later build's for its header only (Version).
func decode(data []byte) (Record, bool) {
	var h header
	if len(data) > maxRecord || json.Unmarshal(data, &h) != nil || h.Version < 1 {
		return Record{}, false
	}
	if h.Version > Version {
		return Record{Version: h.Version, PodUID: h.PodUID, Pod: h.Pod, Container: h.Container, NetnsInode: h.NetnsInode, Passed: h.Passed}, true
	}
	var r Record
	if json.Unmarshal(data, &r) != nil {
		return Record{}, false
	}
	// Names reach rules: only what ParseIfName accepts (the plugin made
	// them so; a hand-edited record is not trusted further).
	for _, n := range append(append([]iptables.IfName{}, r.Spec.ExcludeInterfaces...), r.Spec.RerouteInterfaces...) {
		if _, err := iptables.ParseIfName(string(n)); err != nil {
			return Record{}, false
		}
	}
	return r, true
}
