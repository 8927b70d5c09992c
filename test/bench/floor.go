package main

import (
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// floorProgram is what the as-installed table holds ADD to: the node's
// own program writing the same rules into a fresh namespace, and how ADD
// must have written them.
type floorProgram struct {
	name, node, wantBy string
	backend            release.Backend // "": native nftables

	run func(rss bool) (sample, error)
}

func installedFloor(native bool) (floorProgram, error) {
	if native {
		rs := nftables.Build(iptables.DefaultSpec(), false)
		text := []byte(rs.Commands())
		return floorProgram{name: "nft -f", node: "native nftables", wantBy: "nftables", backend: "",
			run: func(rss bool) (sample, error) { return nftFloorRun(text, rss) }}, nil
	}
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	text, err := iptables.Plan(&rs, nil)
	if err != nil {
		return floorProgram{}, err
	}
	backend, err := release.Auto.Resolve(false)
	if err != nil {
		return floorProgram{}, err
	}
	// The agent writes over netlink where the node's iptables-nft is a
	// release whose layout it reproduces, and as x_tables replaces where
	// it is legacy; the bench checks it did.
	f := floorProgram{name: "iptables-restore", node: string(backend), wantBy: "x_tables", backend: backend,
		run: func(rss bool) (sample, error) { return floorRun(backend, text, rss) }}
	if backend == release.NFT {
		version, err := xtables.NFTVersion(xtables.CommandsFor(backend, iptables.IPv4).Restore)
		if err != nil {
			return floorProgram{}, err
		}
		f.node, f.wantBy = "nft "+version, "iptables-restore"
		if release.HasLayout(version) {
			f.wantBy = "netlink"
		}
	}
	return f, nil
}
