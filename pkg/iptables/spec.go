// Package iptables turns a typed redirect spec into the rule model for a pod's
// network namespace. It is pure: the model renders the iptables-restore input
// that programs the rules, the expectation that CHECK compares against, and the
// cleanup. Only typed values (ports, prefixes, ids, validated names) are ever
// rendered; nothing from an annotation reaches a rule as text.
//
// Both sides use the one model: the plugin's ADD and CHECK, and the node
// agent's audit and inspect. Its subpackages run it (xtables, nfnl), find
// the node's iptables (release), and render the same spec as upstream's
// native nftables ruleset (nftables), for nodes set to native nftables.
package iptables

import "net/netip"

// Family is an IP address family; each has its own tables.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Ports selects TCP ports: all of them, a list, or none (the zero value).
type Ports struct {
	All  bool
	List []uint16
}

// None reports whether the selection captures nothing.
func (p Ports) None() bool { return !p.All && len(p.List) == 0 }

// Prefixes selects destinations: all of them, a list, or none (the zero value).
type Prefixes struct {
	All  bool
	List []netip.Prefix
}

// Spec is how one pod's traffic is sent through its proxy, as Istio's sidecar
// injector and istio-iptables define it (REDIRECT mode).
type Spec struct {
	// ProxyUID and ProxyGID identify the proxy's own traffic, which must never
	// be captured again.
	ProxyUID uint32
	ProxyGID uint32

	// OutboundPort receives captured outbound traffic (Envoy 15001),
	// InboundPort captured inbound traffic (15006).
	OutboundPort uint16
	InboundPort  uint16
	// TunnelPort (HBONE, 15008) is never captured inbound, and never looped
	// back through inbound capture.
	TunnelPort uint16

	// InboundPorts are captured inbound; InboundExclude are skipped when
	// InboundPorts is All.
	InboundPorts   Ports
	InboundExclude []uint16

	// OutboundPorts are always captured, whatever the destination;
	// OutboundExclude are never captured (TCP and UDP).
	OutboundPorts   []uint16
	OutboundExclude []uint16

	// OutboundIPs are the destinations captured outbound; OutboundIPExclude
	// are returned before that.
	OutboundIPs       Prefixes
	OutboundIPExclude []netip.Prefix

	// ExcludeInterfaces: traffic in or out through these is never
	// captured. RerouteInterfaces (virtual machines' interfaces, as with
	// KubeVirt): what arrives through them for OutboundIPs is captured as
	// outbound, the rest goes direct.
	ExcludeInterfaces []IfName
	RerouteInterfaces []IfName

	// DNSCapture sends the app's DNS (TCP and UDP to port 53, any server)
	// to the proxy's DNS listener, DNSPort; the proxy's own queries go out,
	// in a conntrack zone of their own.
	DNSCapture bool

	// TProxy captures inbound TCP with TPROXY in the mangle table instead
	// of nat REDIRECT: the proxy sees the client's real source address.
	// Packets for the proxy carry TProxyMark and are routed to lo through
	// TProxyTable (see PolicyRoute).
	TProxy      bool
	TProxyMark  uint32
	TProxyTable uint32

	// InvalidDrop drops packets conntrack finds INVALID (out of the TCP
	// window) before they reach the pod, where the kernel would answer
	// them with a reset that kills a healthy connection through the
	// proxy (INVALID_DROP=true on istio-proxy).
	InvalidDrop bool
}

// PolicyRoute is the routing TPROXY needs in a family: packets marked Mark
// look up Table, whose one route is "local default dev lo".
type PolicyRoute struct {
	Mark  uint32
	Table uint32
}

// Istio's fixed ports and ids: the defaults of a sidecar pod.
const (
	DefaultProxyID      = 1337
	DefaultOutboundPort = 15001
	DefaultInboundPort  = 15006
	DefaultTunnelPort   = 15008
	ProxyStatusPort     = 15020 // pilot-agent status: never captured inbound; outbound by default
	ProxyHealthPort     = 15021 // health checks, reached by the kubelet
	ProxyMetricsPort    = 15090 // Envoy's Prometheus endpoint
	DNSPort             = 53
	ProxyDNSPort        = 15053 // pilot-agent's DNS proxy
	// TPROXY mode, as istio-iptables defaults them: the inbound mark and
	// its route table, and the mark of the proxy's own traffic to the app
	// over lo.
	DefaultTProxyMark  = 1337
	DefaultTProxyTable = 133
	OutboundMark       = 1338
)

// DefaultSpec is the spec of a pod that carries no traffic annotation.
func DefaultSpec() Spec {
	return Spec{
		ProxyUID:        DefaultProxyID,
		ProxyGID:        DefaultProxyID,
		OutboundPort:    DefaultOutboundPort,
		InboundPort:     DefaultInboundPort,
		TunnelPort:      DefaultTunnelPort,
		InboundPorts:    Ports{All: true},
		InboundExclude:  []uint16{ProxyStatusPort, ProxyHealthPort, ProxyMetricsPort},
		OutboundExclude: []uint16{ProxyStatusPort},
		OutboundIPs:     Prefixes{All: true},
		TProxyMark:      DefaultTProxyMark,
		TProxyTable:     DefaultTProxyTable,
	}
}
