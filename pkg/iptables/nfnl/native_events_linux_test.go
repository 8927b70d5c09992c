package nfnl_test

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// tableEvents runs f in n and returns the table changes its commits
// announced to nf_tables' listeners ("new NAME", "del NAME"), in order:
// what `nft monitor tables` would print.
func tableEvents(t *testing.T, n ns.NetNS, f func() error) []string {
	t.Helper()
	var events []string
	err := n.Do(func(ns.NetNS) error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// Room for a notification a datagram, as older kernels send them.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.NFNLGRP_NFTABLES - 1)}); err != nil {
			return err
		}
		if err := f(); err != nil {
			return err
		}
		// A commit announces its changes before the sending call returns.
		buf := make([]byte, 1<<16)
		for {
			k, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) {
				return nil
			}
			if err != nil {
				return err
			}
			msgs, err := syscall.ParseNetlinkMessage(buf[:k])
			if err != nil {
				return err
			}
			for _, m := range msgs {
				verb := map[uint16]string{unix.NFT_MSG_NEWTABLE: "new", unix.NFT_MSG_DELTABLE: "del"}[m.Header.Type&0xff]
				if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || verb == "" {
					continue
				}
				events = append(events, verb+" "+tableName(m.Data[4:]))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// tableName is NFTA_TABLE_NAME of a table message's attributes.
func tableName(b []byte) string {
	for len(b) >= 4 {
		l := int(b[0]) | int(b[1])<<8
		if l < 4 || l > len(b) {
			break
		}
		if typ := (int(b[2]) | int(b[3])<<8) & 0x3fff; typ == unix.NFTA_TABLE_NAME {
			return strings.TrimRight(string(b[4:l]), "\x00")
		}
		b = b[(l+3)&^3:]
	}
	return "?"
}

// WriteNative deletes only the tables it finds: a transaction that
// deletes tables often waits in the kernel (12-14 ms here, where the
// write alone takes 0.4 ms), and a pod's namespace has none of ours at
// its ADD.
func TestWriteNativeDeletesOnlyTheTablesItFinds(t *testing.T) {
	n := newNS(t)
	rs := nftables.Build(iptables.DefaultSpec(), false)
	if got, want := tableEvents(t, n, func() error { return nfnl.WriteNative(&rs) }), []string{"new " + nftables.TableNat}; !slices.Equal(got, want) {
		t.Errorf("a write into a fresh namespace announced %q, want %q", got, want)
	}
	all := defaultNative()
	want := []string{"del " + nftables.TableNat, "new " + nftables.TableNat, "new " + nftables.TableMangle, "new " + nftables.TableRaw}
	if got := tableEvents(t, n, func() error { return nfnl.WriteNative(&all) }); !slices.Equal(got, want) {
		t.Errorf("a write over the nat table announced %q, want %q", got, want)
	}
	want = []string{"del " + nftables.TableNat, "del " + nftables.TableMangle, "del " + nftables.TableRaw}
	if got := tableEvents(t, n, nfnl.DeleteNative); !slices.Equal(got, want) {
		t.Errorf("DeleteNative announced %q, want %q", got, want)
	}
	if got := tableEvents(t, n, nfnl.DeleteNative); len(got) > 0 {
		t.Errorf("DeleteNative in a namespace without our tables announced %q, want nothing", got)
	}
}

// BenchmarkWriteNative is one pod's native ruleset written into a fresh
// namespace, as at its ADD.
func BenchmarkWriteNative(b *testing.B) {
	rs := nftables.Build(iptables.DefaultSpec(), false)
	benchInFreshNS(b, func(n ns.NetNS) error {
		return n.Do(func(ns.NetNS) error { return nfnl.WriteNative(&rs) })
	})
}
