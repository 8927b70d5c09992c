package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// CheckDocument is check -o json: every node's row and the fleet's
// verdict.
type CheckDocument struct {
	Version int       `json:"version"`
	OK      bool      `json:"ok"`
	Nodes   []NodeRow `json:"nodes"`
}

// checkJSONVersion is CheckDocument's version: fields are added, never
// renamed or removed, within it.
const checkJSONVersion = 1

func checkDocument(rows []NodeRow) CheckDocument {
	d := CheckDocument{Version: checkJSONVersion, OK: true, Nodes: rows}
	for _, r := range rows {
		d.OK = d.OK && r.OK
	}
	return d
}

// printCheck writes check's table, then one line per node that is wrong
// or excluded, saying why.
func printCheck(w io.Writer, d CheckDocument) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NODE\tAGENT\tREADY\tCONFIG\tTAINT\tUNREDIRECTED\tUNCHECKED\tMISSED\tSTATUS")
	for _, r := range d.Nodes {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, or(r.Agent, "-"), readyCell(r), configCell(r),
			yesNo(r.Tainted, "TAINTED", "-"), count(r.Unredirected), count(r.Unchecked), count(r.MissedInjection), statusCell(r))
	}
	_ = tw.Flush()
	var wrong []string
	for _, r := range d.Nodes {
		switch {
		case !r.OK:
			wrong = append(wrong, r.Node)
			fmt.Fprintf(&b, "\nnode %s:\n", r.Node)
			for _, p := range r.Problems {
				fmt.Fprintf(&b, "  - %s\n", p)
			}
		case r.Excluded != "":
			fmt.Fprintf(&b, "\nnode %s: excluded: the DaemonSet keeps off it: %s\n", r.Node, r.Excluded)
		}
	}
	if len(wrong) == 0 {
		fmt.Fprintf(&b, "\nall %d node(s) ok\n", len(d.Nodes))
	} else {
		fmt.Fprintf(&b, "\n%d of %d node(s) wrong: %s\n", len(wrong), len(d.Nodes), strings.Join(wrong, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func readyCell(r NodeRow) string {
	if r.Agent == "" {
		return "-"
	}
	return yesNo(r.AgentReady, "yes", "NO")
}

func configCell(r NodeRow) string {
	switch {
	case r.Chained == nil:
		return "-"
	case *r.Chained:
		return "chained"
	}
	return "NOT-CHAINED"
}

func statusCell(r NodeRow) string {
	switch {
	case !r.OK:
		return "WRONG"
	case r.Excluded != "":
		return "excluded"
	}
	return "ok"
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func count(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
