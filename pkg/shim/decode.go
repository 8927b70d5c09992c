package shim

import (
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// entry is what the shim reads of the plugin's config: where the agent
// listens, and what decides whether the node's iptables goes over netlink.
type entry struct {
	CNIVersion      string          `json:"cniVersion"`
	PodSocket       string          `json:"pod_socket"`
	CacheDir        string          `json:"cache_dir"`
	IptablesBackend release.Backend `json:"iptables_backend"`
	NativeNftables  bool            `json:"native_nftables"`
	PrevResult      *prevResult     `json:"prevResult"`
}

// prevResult is what the shim reads of the primary's result.
type prevResult struct {
	IPs []prevIP `json:"ips"`
}

type prevIP struct {
	Address string `json:"address"`
}

// cniVersion is the config's cniVersion for an error result, "1.0.0" if
// it names none. Read as json.Unmarshal reads it, on past a field of the
// wrong type, so a config the shim could not hand off still gets an
// error of its version; "1.0.0" too for one the walker cannot read.
func cniVersion(stdin []byte) string {
	if v, ok := walkVersion(stdin); ok && v != "" {
		return v
	}
	return "1.0.0"
}

// family is one whose iptables the shim checks: its name on the wire
// (iptables.Family's String, which the agent reads) and whether it is
// IPv6.
type family struct {
	name string
	ipv6 bool
}

var ipv4, ipv6 = family{"ipv4", false}, family{"ipv6", true}

// families are those whose iptables the shim checks: IPv6 only when the
// pod may have it (a primary's result with an IPv6 address, or none to
// tell). The agent hands back an ADD that needs a family it was not told
// of, so this only spares IPv4-only pods a check.
func (c entry) families() []family {
	if c.PrevResult != nil && len(c.PrevResult.IPs) > 0 {
		v6 := false
		for _, ip := range c.PrevResult.IPs {
			v6 = v6 || strings.Contains(ip.Address, ":")
		}
		if !v6 {
			return []family{ipv4}
		}
	}
	return []family{ipv4, ipv6}
}
