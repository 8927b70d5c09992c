package xtables

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Holding finds a sandbox's rules in whichever backend holds them, and
// keeps the guess where it holds them too, or where neither does.
func TestHolding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	for _, tc := range []struct {
		name          string
		guess         release.Backend
		written       []release.Backend
		want          release.Backend
		alsoOther     bool
		guessHasDiffs bool // Check with the guess finds rules missing
	}{
		{"in legacy, guessed nft", release.NFT, []release.Backend{release.Legacy}, release.Legacy, false, true},
		{"in nft, guessed legacy", release.Legacy, []release.Backend{release.NFT}, release.NFT, false, true},
		{"in both, guessed nft", release.NFT, []release.Backend{release.Legacy, release.NFT}, release.NFT, true, false},
		{"in neither, guessed legacy", release.Legacy, nil, release.Legacy, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err := newNS(t).Do(func(ns.NetNS) error {
				for _, b := range tc.written {
					w := &Programmer{Runner: ExecRunner{}, Backend: b}
					for _, rs := range m.Rulesets() {
						if _, err := w.Apply(ctx, rs, Write{Trusted: true}); err != nil {
							return err
						}
					}
				}
				p := &Programmer{Runner: ExecRunner{}, Backend: tc.guess}
				if got, alsoOther := p.Holding(ctx, m); got != tc.want || alsoOther != tc.alsoOther {
					t.Errorf("Holding: %s (also the other: %v), want %s (%v)", got, alsoOther, tc.want, tc.alsoOther)
				}
				diffs, err := p.Check(ctx, m)
				if err != nil {
					return err
				}
				if (len(diffs) > 0) != tc.guessHasDiffs {
					t.Errorf("the guess's own Check: %q", diffs)
				}
				if len(tc.written) > 0 {
					if diffs, err := p.WithBackend(tc.want).Check(ctx, m); err != nil || len(diffs) > 0 {
						t.Errorf("Check where Holding found them: %q, %v", diffs, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
