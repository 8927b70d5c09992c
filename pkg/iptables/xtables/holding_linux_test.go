package xtables

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Holding finds each family of a sandbox's rules in whichever backend
// holds them, and keeps the guess where it holds them too; a family
// neither holds follows the other family, else the guess.
func TestHolding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	m := iptables.Build(iptables.DefaultSpec(), true, true)
	const (
		legacy, nft = release.Legacy, release.NFT
	)
	both := []release.Backend{legacy, nft}
	for _, tc := range []struct {
		name          string
		guess         release.Backend
		v4, v6        []release.Backend // where each family was written
		want4, want6  release.Backend
		also          []iptables.Family
		guessHasDiffs bool // Check with the guess finds rules missing
	}{
		{"in legacy, guessed nft", nft, []release.Backend{legacy}, []release.Backend{legacy}, legacy, legacy, nil, true},
		{"in nft, guessed legacy", legacy, []release.Backend{nft}, []release.Backend{nft}, nft, nft, nil, true},
		{"in both, guessed nft", nft, both, both, nft, nft, []iptables.Family{iptables.IPv4, iptables.IPv6}, false},
		{"in neither, guessed legacy", legacy, nil, nil, legacy, legacy, nil, true},
		{"IPv4 in nft, IPv6 in legacy, guessed nft", nft, []release.Backend{nft}, []release.Backend{legacy}, nft, legacy, nil, true},
		{"IPv4 in nft, IPv6 in legacy, guessed legacy", legacy, []release.Backend{nft}, []release.Backend{legacy}, nft, legacy, nil, true},
		{"IPv4 in legacy, IPv6 in neither, guessed nft", nft, []release.Backend{legacy}, nil, legacy, legacy, nil, true},
		{"IPv4 in both, IPv6 in legacy, guessed nft", nft, both, []release.Backend{legacy}, nft, legacy, []iptables.Family{iptables.IPv4}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err := newNS(t).Do(func(ns.NetNS) error {
				for _, rs := range m.Rulesets() {
					written := map[iptables.Family][]release.Backend{iptables.IPv4: tc.v4, iptables.IPv6: tc.v6}[rs.Family]
					for _, b := range written {
						if _, err := (&Programmer{Runner: ExecRunner{}, Backend: b}).Apply(ctx, rs, Write{Trusted: true}); err != nil {
							return err
						}
					}
				}
				p := &Programmer{Runner: ExecRunner{}, Backend: tc.guess}
				found, also := p.Holding(ctx, m)
				if found.BackendFor(iptables.IPv4) != tc.want4 || found.BackendFor(iptables.IPv6) != tc.want6 || !slices.Equal(also, tc.also) {
					t.Errorf("Holding: IPv4 in %s, IPv6 in %s (also the other: %v), want %s, %s (%v)",
						found.BackendFor(iptables.IPv4), found.BackendFor(iptables.IPv6), also, tc.want4, tc.want6, tc.also)
				}
				diffs, err := p.Check(ctx, m)
				if err != nil {
					return err
				}
				if (len(diffs) > 0) != tc.guessHasDiffs {
					t.Errorf("the guess's own Check: %q", diffs)
				}
				if len(tc.v4) > 0 && len(tc.v6) > 0 {
					if diffs, err := found.Check(ctx, m); err != nil || len(diffs) > 0 {
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
