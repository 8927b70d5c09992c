package cluster

import (
	"encoding/json"
	"os"
	"strings"
)

// ADDLine is the plugin's log line of a successful ADD, the fields tests
// read.
type ADDLine struct {
	Verb, Pod, Error string
	RulesBy          string `json:"rules_by"`
	RanIn            string `json:"ran_in"`
	HandedBack       string `json:"handed_back"`
}

// LastADD is the plugin's last successful ADD of pod ns/name in its log
// file and the one rotated copy (file.1) before it; ok=false when neither
// has one (rotated away?).
func LastADD(file, ns, name string) (last ADDLine, ok bool) {
	for _, f := range []string{file + ".1", file} {
		b, err := os.ReadFile(f) // #nosec G304 -- the node's log, named by the test
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			var l ADDLine
			if json.Unmarshal([]byte(line), &l) == nil && l.Verb == "ADD" && l.Error == "" && l.Pod == ns+"/"+name {
				last, ok = l, true
			}
		}
	}
	return last, ok
}
