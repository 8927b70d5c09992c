package chain_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/chain"
)

func TestOwnedNameExamples(t *testing.T) {
	for primary, want := range map[string]string{
		"00-multus.conf":        "00-istio-cni.conflist",
		"10-aaa.conflist":       "09-istio-cni.conflist",
		"100-crio-bridge.conf":  "099-istio-cni.conflist",
		"1-k8s.conflist":        "1-istio-cni.conflist",
		"1-a.conflist":          "0-istio-cni.conflist",
		"00-aaa.conf":           "0-istio-cni.conflist",
		"00-istio-cni.conflist": "0-istio-cni.conflist",
		"0.conf":                "0-istio-cni.conflist",
		"0":                     "-istio-cni.conflist",
		"calico.conflist":       "0-istio-cni.conflist",
		".hidden.conf":          "-istio-cni.conflist",
		"-x.conf":               "-0-istio-cni.conflist",
		"!x":                    "!0-istio-cni.conflist",
	} {
		got, changed, err := chain.OwnedName("zz.conflist", primary)
		if err != nil || got != want || !changed {
			t.Errorf("OwnedName(_, %q) = %q, %v, %v; want %q", primary, got, changed, err, want)
		}
	}
}

func TestOwnedNameKeepsPreferred(t *testing.T) {
	for _, primary := range []string{"05-cilium.conflist", "10-calico.conflist", "02-istio-cni.conflist0", "zz"} {
		got, changed, err := chain.OwnedName(preferred, primary)
		if err != nil || got != preferred || changed {
			t.Errorf("OwnedName(%q, %q) = %q, %v, %v", preferred, primary, got, changed, err)
		}
	}
}

func TestOwnedNameErrors(t *testing.T) {
	for _, primary := range []string{"", "!", "-", "--", "+-!"} {
		if got, _, err := chain.OwnedName(preferred, primary); err == nil {
			t.Errorf("OwnedName(_, %q) = %q, want an error", primary, got)
		}
	}
	for _, bad := range []string{"", "02-istio-cni.conf", "a/02.conflist", ".conflist", "x.json"} {
		_, _, err := chain.OwnedName(bad, "10-calico.conflist")
		if err == nil || !strings.Contains(err.Error(), ".conflist") {
			t.Errorf("OwnedName(%q, _) err = %v, want one naming .conflist", bad, err)
		}
	}
}

// TestOwnedNameProperty: over tricky and random names, the result sorts
// strictly before the primary and ends in .conflist (a generated one in
// OwnedSuffix), and there is an error exactly when every byte of the primary
// is at or below '-'.
func TestOwnedNameProperty(t *testing.T) {
	names := []string{"00-multus.conf", "0.conf", "!", "0", "00", "000-a", "9", "99-loopback.conf",
		"10-calico.conflist", "05-cilium.conflist", "-", "-0", "-.conf", "--a", "0-", "0-a",
		"00--", "0-istio-cni.conflist", "-istio-cni.conflist", "-istio-cni.conflis", "00-istio-cni.conflist",
		"01-istio-cni.conflist", ".", "..conf", "a", "A", "_", "~", "\xff.conf", " x.conf", "0\x01"}
	rnd := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0019-._aZ! istio-cni.conflist"
	for range 5000 {
		b := make([]byte, 1+rnd.IntN(12))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, primary := range names {
		for _, pref := range []string{preferred, "zz.conflist", "00.conflist"} {
			name, changed, err := chain.OwnedName(pref, primary)
			impossible := !strings.ContainsFunc(primary, func(r rune) bool { return r > '-' })
			switch {
			case err != nil:
				if !impossible {
					t.Fatalf("OwnedName(%q, %q): %v", pref, primary, err)
				}
			case impossible && pref >= primary:
				t.Fatalf("OwnedName(%q, %q) = %q, want an error", pref, primary, name)
			case name >= primary:
				t.Fatalf("OwnedName(%q, %q) = %q does not sort first", pref, primary, name)
			case changed != (name != pref), changed && pref < primary:
				t.Fatalf("OwnedName(%q, %q) = %q, changed %v", pref, primary, name, changed)
			case changed && !strings.HasSuffix(name, chain.OwnedSuffix):
				t.Fatalf("OwnedName(%q, %q) = %q lacks %s", pref, primary, name, chain.OwnedSuffix)
			}
		}
	}
}
