package cluster

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// The fleet's link: a bridge in this machine's network namespace holding
// the API server's address, each node's eth0 on it; node i (from 1) has
// address .(10+i) there and pods in 10.252.i.0/24 on its own bridge.
const fleetBridge = "icnifleet0"

var (
	fleetLink   = netip.MustParsePrefix("10.251.0.0/24")
	fleetHost   = netip.MustParseAddr("10.251.0.1")
	fleetSubnet = func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 252, byte(i), 0}), 24) // #nosec G115 -- at most 9 nodes
	}
	fleetNodeIP = func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 251, 0, byte(10 + i)}) } // #nosec G115 -- at most 9 nodes
)

// fleetRangesFree fails when this machine already routes the link's or a
// node's pod range: the fleet's routes would replace the machine's own
// (ip route replace), and its traffic would go where it was not made.
// What a killed run left is gone by now (SweepStale deletes its links,
// and their routes with them).
func fleetRangesFree(nodes int, primary Primary) error {
	prefixes := []netip.Prefix{fleetLink}
	for i := 1; i <= nodes; i++ {
		prefixes = append(prefixes, fleetSubnet(i))
	}
	if primary == PrimaryFlannel {
		// Its ranges are the controller manager's to hand out.
		prefixes = []netip.Prefix{fleetLink, FlannelNetwork}
	}
	for _, p := range prefixes {
		// root: the prefix itself and any more specific route inside it.
		out, err := exec.Command("ip", "-4", "route", "show", "root", p.String()).CombinedOutput() // #nosec G204 -- the fleet's own ranges
		if err != nil {
			return fmt.Errorf("reading this machine's routes in %s: %w: %s", p, err, out)
		}
		if r := strings.TrimSpace(string(out)); r != "" {
			return fmt.Errorf("this machine already routes in %s (%s): the fleet's ranges are %s and 10.252.1-9.0/24 (a Flannel fleet's, %s)", p, r, fleetLink, FlannelNetwork)
		}
	}
	return nil
}
