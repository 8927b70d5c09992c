package decision

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables"
)

const (
	allowedPorts    = "want a comma-separated list of ports from 1 to 65535"
	allowedPortsAll = "want * or a comma-separated list of ports from 1 to 65535"
	allowedCIDRs    = "want a comma-separated list of CIDRs such as 10.0.0.0/8 or fd00::/8"
	allowedCIDRsAll = "want * or a comma-separated list of CIDRs such as 10.0.0.0/8 or fd00::/8"
)

// items splits a comma-separated annotation value. Spaces around items are
// allowed; an empty item is not. An empty or blank value has no items.
func items(v string) ([]string, bool) {
	if strings.TrimSpace(v) == "" {
		return nil, true
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, false
		}
	}
	return parts, true
}

// ParsePorts reads a comma-separated port list. field names the annotation
// in the error.
func ParsePorts(field, v string) ([]uint16, error) { return parsePorts(field, v, allowedPorts) }

func parsePorts(field, v, allowed string) ([]uint16, error) {
	parts, ok := items(v)
	if !ok {
		return nil, &InvalidError{field, v, "empty item; " + allowed}
	}
	out := make([]uint16, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, &InvalidError{field, v, "bad port " + strconv.Quote(p) + "; " + allowed}
		}
		out = append(out, uint16(n))
	}
	return dedup(out), nil
}

func parsePortsOrAll(field, v string) (iptables.Ports, error) {
	if strings.TrimSpace(v) == "*" {
		return iptables.Ports{All: true}, nil
	}
	ports, err := parsePorts(field, v, allowedPortsAll)
	if err != nil {
		return iptables.Ports{}, err
	}
	return iptables.Ports{List: ports}, nil
}

func parsePortsAnn(ann map[string]string, field string) ([]uint16, error) {
	v, ok := ann[field]
	if !ok {
		return nil, nil
	}
	return ParsePorts(field, v)
}

// ParsePrefixes reads a comma-separated CIDR list; each must be a prefix
// (10.0.0.0/8, 10.1.2.3/32), not a bare address.
func ParsePrefixes(field, v string) ([]netip.Prefix, error) {
	return parsePrefixes(field, v, allowedCIDRs)
}

func parsePrefixes(field, v, allowed string) ([]netip.Prefix, error) {
	parts, ok := items(v)
	if !ok {
		return nil, &InvalidError{field, v, "empty item; " + allowed}
	}
	out := make([]netip.Prefix, 0, len(parts))
	for _, p := range parts {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, &InvalidError{field, v, "bad CIDR " + strconv.Quote(p) + "; " + allowed}
		}
		// ::ffff:a.b.c.d/n is an IPv4 range; its traffic is IPv4.
		// ::a.b.c.d (IPv4-compatible, deprecated by RFC 4291) is rejected:
		// it names no IPv4 traffic and iptables prints it differently.
		if ipv4Compatible(pfx.Addr()) {
			return nil, &InvalidError{field, v, "IPv4-compatible CIDR " + strconv.Quote(p) + " is deprecated; use the IPv4 range; " + allowed}
		}
		if pfx.Addr().Is4In6() {
			if pfx.Bits() < 96 {
				return nil, &InvalidError{field, v, "IPv4-mapped CIDR " + strconv.Quote(p) + " wider than /96; " + allowed}
			}
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		out = append(out, pfx.Masked())
	}
	return out, nil
}

func parsePrefixesOrAll(field, v string) (iptables.Prefixes, error) {
	if strings.TrimSpace(v) == "*" {
		return iptables.Prefixes{All: true}, nil
	}
	list, err := parsePrefixes(field, v, allowedCIDRsAll)
	if err != nil {
		return iptables.Prefixes{}, err
	}
	return iptables.Prefixes{List: list}, nil
}

// ipv4Compatible reports ::a.b.c.d: the first 96 bits zero and the next 16
// not (::1 and ::6 stay IPv6).
func ipv4Compatible(a netip.Addr) bool {
	b := a.As16()
	return a.Is6() && !a.Is4In6() && [12]byte(b[:12]) == [12]byte{} && b[12]|b[13] != 0
}

// ParseInterfaces reads a comma-separated list of interface names.
func ParseInterfaces(field, v string) ([]iptables.IfName, error) {
	parts, ok := items(v)
	if !ok {
		return nil, &InvalidError{field, v, "empty item; want a comma-separated list of interface names"}
	}
	var out []iptables.IfName
	for _, p := range parts {
		name, err := iptables.ParseIfName(p)
		if err != nil {
			return nil, &InvalidError{field, v, err.Error()}
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}
