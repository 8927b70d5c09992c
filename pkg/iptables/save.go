package iptables

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Observed is a family's tables as iptables-save printed them.
type Observed struct {
	Tables map[string]*ObservedTable
}

// ObservedTable is one table: its chains in printed order and each chain's
// rule specifications (the text after "-A CHAIN ").
type ObservedTable struct {
	Chains []string
	Rules  map[string][]string
}

// ParseSave reads iptables-save output.
func ParseSave(out []byte) (*Observed, error) {
	obs := &Observed{Tables: map[string]*ObservedTable{}}
	var cur *ObservedTable
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = &ObservedTable{Rules: map[string][]string{}}
			obs.Tables[line[1:]] = cur
		case line == "COMMIT":
			cur = nil
		case cur == nil:
			return nil, fmt.Errorf("iptables-save line %d: %q outside a table", n, line)
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cur.Chains = append(cur.Chains, name)
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			cur.Rules[chain] = append(cur.Rules[chain], spec)
		default:
			return nil, fmt.Errorf("iptables-save line %d: unexpected %q", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading iptables-save output: %w", err)
	}
	return obs, nil
}

// jumpTarget is the chain an observed rule jumps to: the word after its last
// "-j" or "-g", in the rule's words (splitQuoted keeps a quoted comment one
// word, so a "-j" inside it is not taken).
func jumpTarget(toks []string) string {
	for i := len(toks) - 2; i >= 0; i-- {
		if toks[i] == "-j" || toks[i] == "-g" {
			return toks[i+1]
		}
	}
	return ""
}

// splitQuoted splits on spaces, keeping double-quoted words whole.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, escaped := false, false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quoted:
			escaped = true
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// owned reports whether a chain is ours.
// Owned reports whether a chain is one of ours (ChainPrefix).
func Owned(chain string) bool { return strings.HasPrefix(chain, ChainPrefix) }

// ours reports whether an observed rule in a chain that is not ours is one
// of ours: it jumps into one of our chains, or carries our Tag.
func ours(spec string) bool {
	toks := splitQuoted(spec)
	if Owned(jumpTarget(toks)) {
		return true
	}
	for i := 0; i+1 < len(toks); i++ {
		if toks[i] == "--comment" && strings.Trim(toks[i+1], `"`) == RuleTag {
			return true
		}
	}
	return false
}

// OwnedChains lists the chains of ours present in a table.
func (t *ObservedTable) OwnedChains() []string {
	var out []string
	for _, c := range t.Chains {
		if Owned(c) {
			out = append(out, c)
		}
	}
	return out
}

// Empty reports whether the family holds nothing of ours.
func (o *Observed) Empty() bool {
	if o == nil {
		return true
	}
	for _, t := range o.Tables {
		if hasOurs(t) {
			return false
		}
	}
	return true
}
