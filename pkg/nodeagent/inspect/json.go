package inspect

import (
	"encoding/json"
	"io"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// JSONVersion is the version of inspect's JSON forms (Document,
// NodeDocument). Fields are added, never renamed or removed, within a
// version; kubectl istio-cni reads them.
const JSONVersion = 1

// Document is a Report as JSON (inspect -o json): the same facts as Print,
// under field names that stay.
type Document struct {
	Version    int           `json:"version"`
	Build      string        `json:"build,omitempty"`
	Pod        string        `json:"pod"`
	UID        string        `json:"uid"`
	Node       string        `json:"node"`
	Phase      string        `json:"phase"`
	CNI        CNI           `json:"cni"`
	Decision   DecisionDoc   `json:"decision"`
	Injection  *InjectionDoc `json:"injection,omitempty"`
	Notes      []string      `json:"notes,omitempty"`
	Netns      NetnsDoc      `json:"netns"`
	Rules      RulesDoc      `json:"rules"`
	Verdict    Verdict       `json:"verdict"`
	Consistent bool          `json:"consistent"`
}

// CNI is whether the config the runtime uses chains istio-cni.
type CNI struct {
	Config  string `json:"config,omitempty"`
	Chained bool   `json:"chained"`
	Error   string `json:"error,omitempty"`
}

// DecisionDoc is the plugin's decision for the pod.
type DecisionDoc struct {
	Redirect bool   `json:"redirect"`
	Reason   string `json:"reason"`
	Families string `json:"families,omitempty"`
	// Recorded: as ADD recorded for this sandbox.
	Recorded        bool   `json:"recorded"`
	SettingsChanged string `json:"settingsChanged,omitempty"`
	Invalid         string `json:"invalid,omitempty"`
	NewerRecord     int    `json:"newerRecord,omitempty"`
}

// InjectionDoc is the injector's verdict, or why there is none.
type InjectionDoc struct {
	Expected bool   `json:"expected"`
	Injected bool   `json:"injected"`
	Missed   bool   `json:"missed"`
	Why      string `json:"why,omitempty"`
	Error    string `json:"error,omitempty"`
}

// NetnsDoc is the pod's network namespace, or why it was not read.
type NetnsDoc struct {
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
}

// RulesDoc are the rules the pod should have, has and the difference.
type RulesDoc struct {
	Native bool `json:"native"`
	// Backend is the iptables the rules were read with (legacy or nft),
	// when not native; BackendIPv6 IPv6's, when another.
	Backend     release.Backend `json:"backend,omitempty"`
	BackendIPv6 release.Backend `json:"backendIPv6,omitempty"`
	Want        []string        `json:"want"`
	Have        []string        `json:"have"`
	Diffs       []string        `json:"diffs"`
}

// Document is the report's JSON form.
func (r Report) Document() Document {
	d := Document{
		Version: JSONVersion, Build: r.Build, Pod: r.Pod, UID: r.UID, Node: r.Node, Phase: r.Phase,
		CNI: CNI{Config: r.Config, Chained: r.Chained, Error: r.ConfigErr},
		Decision: DecisionDoc{Redirect: r.Redirect, Reason: r.Reason, Families: r.Families, Recorded: r.Recorded,
			SettingsChanged: r.SettingsChanged, Invalid: r.Invalid, NewerRecord: r.NewerRecord},
		Notes:      r.Notes,
		Netns:      NetnsDoc{Path: r.Netns, Error: r.NetnsErr},
		Rules:      RulesDoc{Native: r.Native, Backend: r.Backend, BackendIPv6: r.BackendIPv6, Want: nonNil(r.Want), Have: nonNil(r.Have), Diffs: nonNil(r.Diffs)},
		Verdict:    r.Verdict(),
		Consistent: r.Consistent(),
	}
	switch {
	case r.InjectionErr != "":
		d.Injection = &InjectionDoc{Error: r.InjectionErr}
	case r.Injection != nil:
		v := r.Injection
		d.Injection = &InjectionDoc{Expected: v.Expected, Injected: v.Injected, Missed: v.Missed(), Why: v.Why}
	}
	return d
}

// PrintJSON writes the report's JSON form, indented, one document.
func (r Report) PrintJSON(w io.Writer) error {
	return writeJSON(w, r.Document())
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// nonNil: an empty list is [] in JSON, not null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
