// Package podsim does on this machine what a node's container runtime does
// for the CNI: a network namespace per pod sandbox, the conflist chain run
// through libcni (the bridge and host-local reference plugins as the primary
// CNI, then istio-cni), and processes started inside sandboxes. The
// integration tests, the benchmark and the demo share it.
package podsim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

// Addresses of the bridge: documentation ranges, only ever used inside the
// namespaces made here.
const (
	SubnetV4 = "198.51.100.0/24"
	SubnetV6 = "2001:db8:100::/64"
)

// Network is a node's primary CNI: a bridge with host-local IPAM.
type Network struct {
	Name    string
	Bridge  string
	dataDir string
	cni     *libcni.CNIConfig
}

// NewNetwork prepares a bridge network whose plugins are in binDir; state
// goes under stateDir. The bridge appears with the first ADD.
func NewNetwork(binDir, stateDir string) *Network {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	return &Network{
		Name:    "podsim",
		Bridge:  "icni" + hex.EncodeToString(suffix),
		dataDir: stateDir,
		cni:     libcni.NewCNIConfigWithCacheDir([]string{binDir}, stateDir, nil),
	}
}

// Close deletes the bridge from the host.
func (n *Network) Close() error {
	l, err := netlink.LinkByName(n.Bridge)
	if err != nil { // no bridge: nothing to delete
		return nil
	}
	return netlink.LinkDel(l)
}

// ConfList is the node's conflist: bridge + host-local, then any chained
// plugin entries (istio-cni's).
func (n *Network) ConfList(version string, chained ...map[string]any) (*libcni.NetworkConfigList, error) {
	plugins := []any{map[string]any{
		"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": false,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": n.dataDir,
			"ranges": [][]map[string]string{{{"subnet": SubnetV4}}, {{"subnet": SubnetV6}}},
		},
	}}
	for _, c := range chained {
		plugins = append(plugins, c)
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": version, "name": n.Name, "plugins": plugins})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(raw)
}

// Add runs the chain's ADD for a sandbox, as the runtime does when it
// creates it, and waits until its IPv6 addresses are usable.
func (n *Network) Add(ctx context.Context, s *Sandbox, list *libcni.NetworkConfigList) error {
	s.list = list
	res, err := n.cni.AddNetworkList(ctx, list, s.rt)
	if err != nil {
		return err
	}
	s.added = true
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		return err
	}
	for _, ip := range cur.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a = a.Unmap(); a.Is4() {
			s.V4 = a
		} else {
			s.V6 = a
		}
	}
	return s.waitIPv6Ready(10 * time.Second)
}

// Check runs the chain's CHECK for a sandbox.
func (n *Network) Check(ctx context.Context, s *Sandbox) error {
	if s.list == nil {
		return errors.New("CHECK before ADD")
	}
	return n.cni.CheckNetworkList(ctx, s.list, s.rt)
}

// Del runs the chain's DEL for a sandbox, as the runtime does when it
// removes it.
func (n *Network) Del(ctx context.Context, s *Sandbox) error {
	if s.list == nil {
		return nil
	}
	if err := n.cni.DelNetworkList(ctx, s.list, s.rt); err != nil {
		return fmt.Errorf("DEL %s: %w", s.Path(), err)
	}
	return nil
}

// AddDelegate calls one plugin config for a sandbox the way Multus calls
// a delegate network: after the primary's chain ran in the same namespace,
// with the delegate's own interface name and no prevResult.
func (n *Network) AddDelegate(ctx context.Context, s *Sandbox, conf *libcni.PluginConfig, ifName string) (types.Result, error) {
	return n.cni.AddNetwork(ctx, conf, s.delegateRT(ifName))
}

// CheckDelegate runs CHECK for a delegate (libcni passes ADD's cached
// result as prevResult).
func (n *Network) CheckDelegate(ctx context.Context, s *Sandbox, conf *libcni.PluginConfig, ifName string) error {
	return n.cni.CheckNetwork(ctx, conf, s.delegateRT(ifName))
}

// DelDelegate runs DEL for a delegate.
func (n *Network) DelDelegate(ctx context.Context, s *Sandbox, conf *libcni.PluginConfig, ifName string) error {
	return n.cni.DelNetwork(ctx, conf, s.delegateRT(ifName))
}
