package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// runUDP answers every datagram on host:port ([::] by default) with one
// line:
//
//	udp name=<name> peer=<ip:port>
//
// It stands for a DNS resolver, or for the proxy's DNS listener, which
// binds 127.0.0.1:15053 (and [::1]:15053) as pilot-agent does: an
// unbound socket would answer a redirected query from the pod's address,
// which conntrack cannot map back to the resolver the app asked.
func runUDP(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("udp", stderr)
	var port portValue
	fs.Var(&port, "port", "UDP port to answer on (required)")
	name := fs.String("name", "udp", "name reported in every reply")
	host := fs.String("host", "", "address to bind (default: every address)")
	readyFile := fs.String("ready-file", "", "file written once the socket is bound")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !port.set || port.port == 0 {
		fmt.Fprintln(stderr, "testproxy udp: --port is required (1-65535)")
		fs.Usage()
		return errUsage
	}
	var ip net.IP
	if *host != "" {
		if ip = net.ParseIP(*host); ip == nil {
			fmt.Fprintf(stderr, "testproxy udp: --host %q: want an IP address\n", *host)
			return errUsage
		}
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: int(port.port)})
	if err != nil {
		return err
	}
	if *readyFile != "" {
		if err := writeAtomic(*readyFile, fmt.Sprintf("listener=udp addr=%s\n", c.LocalAddr())); err != nil {
			_ = c.Close()
			return err
		}
	}
	go func() {
		<-ctx.Done()
		_ = c.Close()
	}()
	buf := make([]byte, 512)
	for {
		_, peer, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
		reply := fmt.Sprintf("udp name=%s peer=%s\n", *name, peer)
		if _, err := c.WriteToUDPAddrPort([]byte(reply), peer); err != nil {
			fmt.Fprintf(stderr, "testproxy udp: reply to %s: %v\n", peer, err)
		}
	}
}

// udpExchange sends one datagram to addr, from srcPort unless it is 0, and
// copies the first reply to out.
func udpExchange(ctx context.Context, addr string, srcPort uint16, timeout time.Duration, out io.Writer) error {
	d := net.Dialer{Timeout: timeout}
	if srcPort != 0 {
		d.LocalAddr = &net.UDPAddr{Port: int(srcPort)}
	}
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("query\n")); err != nil {
		return fmt.Errorf("send to %s: %w", addr, err)
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("reply from %s: %w", addr, err)
	}
	_, err = out.Write(buf[:n])
	return err
}
