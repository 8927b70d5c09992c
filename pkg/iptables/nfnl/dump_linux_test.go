package nfnl

import (
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Dump prints every table, chain and rule of one family in the calling
// thread's network namespace as the kernel returns them, one line each,
// with every attribute but the ones that name an object's identity or
// usage (handles, positions, use counts, counter values: a chain's
// counters print as being there). Two namespaces
// whose dumps are equal hold the same rules down to each expression's
// encoding, which iptables-save cannot tell: it prints some different
// encodings alike.
func Dump(family uint8) (string, error) {
	c, err := dial()
	if err != nil {
		return "", err
	}
	defer c.close()
	var sb strings.Builder
	for _, what := range []struct {
		typ  uint16
		name string
		skip map[uint16]bool
	}{
		{unix.NFT_MSG_GETTABLE, "table", map[uint16]bool{unix.NFTA_TABLE_USE: true, nftaTableHandle: true}},
		{unix.NFT_MSG_GETCHAIN, "chain", map[uint16]bool{unix.NFTA_CHAIN_HANDLE: true, unix.NFTA_CHAIN_USE: true}},
		{unix.NFT_MSG_GETRULE, "rule", map[uint16]bool{unix.NFTA_RULE_HANDLE: true, unix.NFTA_RULE_POSITION: true}},
	} {
		msgs, err := c.dump(what.typ, family)
		if err != nil {
			return "", fmt.Errorf("dumping %ss: %w", what.name, err)
		}
		for _, m := range msgs {
			sb.WriteString(what.name)
			for _, a := range parseAttrs(m) {
				if what.skip[a.typ] {
					continue
				}
				sb.WriteString(" ")
				if what.typ == unix.NFT_MSG_GETRULE && a.typ == unix.NFTA_RULE_EXPRESSIONS {
					sb.WriteString(exprsString(a.value))
					continue
				}
				if what.typ == unix.NFT_MSG_GETCHAIN && a.typ == unix.NFTA_CHAIN_COUNTERS {
					fmt.Fprintf(&sb, "%d=counters", a.typ)
					continue
				}
				fmt.Fprintf(&sb, "%d=%s", a.typ, valueString(a.value))
			}
			sb.WriteString("\n")
		}
	}
	return sb.String(), nil
}

// exprsString prints a rule's expressions: name{attributes}, with counter
// values left out.
func exprsString(b []byte) string {
	var parts []string
	for _, elem := range parseAttrs(b) {
		name, data := exprParts(elem.value)
		if name == "counter" {
			parts = append(parts, "counter")
			continue
		}
		parts = append(parts, name+"{"+nestedString(data)+"}")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func nestedString(b []byte) string {
	var parts []string
	for _, a := range parseAttrs(b) {
		parts = append(parts, fmt.Sprintf("%d=%s", a.typ, valueString(a.value)))
	}
	return strings.Join(parts, ",")
}

// valueString prints a string attribute as text and anything else as hex.
func valueString(v []byte) string {
	t := trimNul(v)
	printable := len(t) > 0 && len(t) == len(v)-1
	for _, c := range t {
		if c < 0x20 || c > 0x7e {
			printable = false
		}
	}
	if printable {
		return fmt.Sprintf("%q", t)
	}
	return hex.EncodeToString(v)
}
