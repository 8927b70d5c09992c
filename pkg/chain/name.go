package chain

import (
	"fmt"
	"path/filepath"
	"strings"
)

// OwnedSuffix ends every name OwnedName generates. FindPrimary treats a file
// with this suffix and an istio-cni entry as our own output, so a name
// chosen for an earlier primary is never mistaken for the node's CNI.
const OwnedSuffix = "-istio-cni.conflist"

// OwnedName returns preferred if it sorts strictly before primaryName (byte
// order, as runtimes sort the directory); otherwise a name built from
// primaryName that does. changed reports whether the result differs from
// preferred (the caller logs it).
//
// The generated name keeps the primary's leading number where it can, so
// the two stay together in a listing:
//
//	00-multus.conf     -> 00-istio-cni.conflist  (same number: '-','i' < '-','m')
//	10-aaa.conflist    -> 09-istio-cni.conflist  (number minus one, same width)
//	00-aaa.conf        -> 0-istio-cni.conflist   (all zeros: one zero fewer)
//	0.conf, 0          -> 0-istio-cni.conflist, -istio-cni.conflist
//	calico.conflist    -> 0-istio-cni.conflist   (any name from ':' up)
//	.hidden.conf       -> -istio-cni.conflist    ('-' < '.')
//
// Leading bytes at or below '-' (such as '!' or '-') are copied first, since
// nothing in our alphabet sorts below them; the rules above then apply to
// the rest ("-x.conf" -> "-0-istio-cni.conflist"). A primary made only of
// such bytes ("!", "--") has no name before it: that is an error.
func OwnedName(preferred, primaryName string) (name string, changed bool, err error) {
	if err := checkPreferred(preferred); err != nil {
		return "", false, err
	}
	if preferred < primaryName {
		return preferred, false, nil
	}
	name, ok := nameBefore(primaryName)
	if !ok {
		return "", false, fmt.Errorf("no file name sorts before the primary CNI config %q: every byte of it sorts at or below '-'; rename it, or set an owned name that sorts before it", primaryName)
	}
	return name, true, nil
}

func checkPreferred(preferred string) error {
	if preferred == "" || filepath.Base(preferred) != preferred || !strings.HasSuffix(preferred, ".conflist") || preferred == ".conflist" {
		return fmt.Errorf("owned config name %q: want a file name (no directory) ending in .conflist; runtimes read any other file as one plugin config", preferred)
	}
	return nil
}

// nameBefore implements the scheme documented on OwnedName.
func nameBefore(p string) (string, bool) {
	k := 0
	for k < len(p) && p[k] <= '-' {
		k++
	}
	head, rest := p[:k], p[k:]
	if rest == "" {
		return "", false
	}
	digits := rest[:len(rest)-len(strings.TrimLeft(rest, "0123456789"))]
	switch {
	case digits == "" && rest[0] > '9':
		return head + "0" + OwnedSuffix, true
	case digits == "":
		return head + OwnedSuffix, true // rest starts with '.' or '/'
	case digits+OwnedSuffix < rest:
		return head + digits + OwnedSuffix, true
	}
	if less, ok := decrement(digits); ok {
		return head + less + OwnedSuffix, true
	}
	// All zeros: the shorter run puts '-' where the primary has '0'.
	return head + digits[1:] + OwnedSuffix, true
}

// decrement subtracts one from a decimal string, keeping its width ("10" ->
// "09"); false for all zeros.
func decrement(d string) (string, bool) {
	b := []byte(d)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] > '0' {
			b[i]--
			return string(b), true
		}
		b[i] = '9'
	}
	return "", false
}
