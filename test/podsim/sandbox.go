package podsim

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Sandbox is a pod sandbox's network namespace and what the chain returned.
type Sandbox struct {
	V4, V6 netip.Addr
	netns  ns.NetNS
	rt     *libcni.RuntimeConf
	list   *libcni.NetworkConfigList
	added  bool
}

// NewSandbox makes a namespace for pod podNS/podName with lo up, as the
// runtime's loopback plugin leaves it (REDIRECT of local traffic needs lo).
func NewSandbox(podNS, podName string) (*Sandbox, error) {
	netns, err := testutils.NewNS()
	if err != nil {
		return nil, err
	}
	return newSandbox(netns, podNS, podName)
}

// newSandbox is a sandbox in netns, with lo brought up.
func newSandbox(netns ns.NetNS, podNS, podName string) (*Sandbox, error) {
	s := &Sandbox{netns: netns, rt: &libcni.RuntimeConf{
		ContainerID: "ctr-" + filepath.Base(netns.Path()),
		NetNS:       netns.Path(),
		IfName:      "eth0",
		Args:        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", podNS}, {"K8S_POD_NAME", podName}},
	}}
	err := netns.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// SetPodUID passes the pod's uid in CNI_ARGS (K8S_POD_UID) from now on,
// as containerd and CRI-O do: the plugin matches a sandbox's record by it.
func (s *Sandbox) SetPodUID(uid string) {
	s.rt.Args = append(s.rt.Args, [2]string{"K8S_POD_UID", uid})
}

// Path is the namespace's path, CNI_NETNS.
func (s *Sandbox) Path() string { return s.netns.Path() }

// NetNS is the namespace, for running Go code inside it.
func (s *Sandbox) NetNS() ns.NetNS { return s.netns }

// Close removes the namespace.
func (s *Sandbox) Close() error { return CloseNetns(s.netns) }

// waitIPv6Ready waits until duplicate address detection has finished for
// every IPv6 address in the namespace, as a pod's traffic would.
func (s *Sandbox) waitIPv6Ready(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var tentative []string
		err := s.netns.Do(func(ns.NetNS) error {
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
			for _, a := range addrs {
				if a.Flags&unix.IFA_F_TENTATIVE != 0 {
					tentative = append(tentative, a.IPNet.String())
				}
			}
			return err
		})
		if err != nil || len(tentative) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("IPv6 addresses still tentative after %s: %v", limit, tentative)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// delegateRT is the sandbox's runtime config with another interface name.
func (s *Sandbox) delegateRT(ifName string) *libcni.RuntimeConf {
	rt := *s.rt
	rt.IfName = ifName
	return &rt
}
