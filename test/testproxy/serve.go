package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ioTimeout bounds writing the reply and draining the peer, so a stuck peer
// cannot keep a handler (and shutdown) waiting forever.
const ioTimeout = 5 * time.Second

// endpoint is one listener: its name in the ready file, its port and the line
// it answers an accepted connection with.
type endpoint struct {
	name  string
	port  uint16
	reply func(c *net.TCPConn) string
	// transparent: IP_TRANSPARENT, so TPROXY can hand it connections
	// addressed to other hosts.
	transparent bool
	// ipv4Only binds 0.0.0.0 instead of [::], as Envoy does unless the pod
	// sets ISTIO_DUAL_STACK.
	ipv4Only bool
}

// tproxyReply is proxyReply for a transparent listener: a TPROXY'd
// connection's local address is the original destination (no NAT).
func tproxyReply(listener string) func(*net.TCPConn) string {
	return func(c *net.TCPConn) string {
		return fmt.Sprintf("proxy listener=%s orig=%s peer=%s uid=%d\n",
			listener, plainAddrPort(c.LocalAddr()), plainAddrPort(c.RemoteAddr()), os.Getuid())
	}
}

// transparent sets IP_TRANSPARENT and IPV6_TRANSPARENT on a socket before
// it binds (it needs CAP_NET_ADMIN, as Envoy's does).
func transparent(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1); serr == nil {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

func proxyReply(listener string) func(*net.TCPConn) string {
	return func(c *net.TCPConn) string {
		orig := "none" // getsockopt failed, typically ENOENT: no conntrack entry
		if dst, err := originalDst(c); err == nil {
			orig = dst.String()
		}
		return fmt.Sprintf("proxy listener=%s orig=%s peer=%s uid=%d\n",
			listener, orig, plainAddrPort(c.RemoteAddr()), os.Getuid())
	}
}

// forwardTimeout bounds a forwarded exchange, within the test client's
// own 2 s, so its error line still reaches the client.
const forwardTimeout = 1500 * time.Millisecond

// forwardReply is reply's line followed by what the connection's original
// destination sends when dialed from here, or an "error: forward ..." line.
func forwardReply(ctx context.Context, reply func(*net.TCPConn) string) func(*net.TCPConn) string {
	return func(c *net.TCPConn) string {
		line := reply(c)
		dst, err := originalDst(c)
		if err != nil {
			return line + "error: forward: no original destination: " + err.Error() + "\n"
		}
		// Not redirected here (a dial of the listener itself): forwarding
		// would dial this listener again, and again.
		if dst == plainAddrPort(c.LocalAddr()) {
			return line + "error: forward: the original destination is this listener\n"
		}
		var upstream strings.Builder
		if err := dialAndCopy(ctx, dst.String(), forwardTimeout, &upstream); err != nil {
			return line + upstream.String() + "error: forward to " + dst.String() + ": " + err.Error() + "\n"
		}
		return line + upstream.String()
	}
}

func serverReply(name string) func(*net.TCPConn) string {
	return func(c *net.TCPConn) string {
		return fmt.Sprintf("server name=%s local=%s peer=%s\n",
			name, plainAddrPort(c.LocalAddr()), plainAddrPort(c.RemoteAddr()))
	}
}

// plainAddrPort returns a TCP address with v4-mapped IPv6 shown as plain IPv4,
// so "[::ffff:127.0.0.1]:80" prints as "127.0.0.1:80".
func plainAddrPort(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// serve binds every endpoint on [::] (dual-stack: IPv4 arrives v4-mapped;
// on 0.0.0.0 with ipv4Only),
// writes the ready file, and answers connections until ctx is cancelled
// (a clean stop, nil) or an accept fails.
func serve(ctx context.Context, eps []endpoint, readyFile string, stderr io.Writer) error {
	lns := make([]*net.TCPListener, 0, len(eps))
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, ep := range eps {
		var lc net.ListenConfig
		if ep.transparent {
			lc.Control = transparent
		}
		network, host := "tcp", "::"
		if ep.ipv4Only {
			network, host = "tcp4", "0.0.0.0"
		}
		ln, err := lc.Listen(context.Background(), network, net.JoinHostPort(host, strconv.Itoa(int(ep.port))))
		if err != nil {
			return fmt.Errorf("%s listener: %w", ep.name, err)
		}
		lns = append(lns, ln.(*net.TCPListener))
	}
	if readyFile != "" {
		if err := writeReadyFile(readyFile, eps, lns); err != nil {
			return err
		}
	}

	var wg sync.WaitGroup
	errc := make(chan error, len(lns))
	for i, ln := range lns {
		wg.Go(func() { errc <- acceptLoop(ln, eps[i], &wg, stderr) })
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, ln := range lns {
		ln.Close()
	}
	wg.Wait()
	return err
}

// acceptLoop answers each connection on its own goroutine (tracked by wg) and
// returns nil once the listener is closed.
func acceptLoop(ln *net.TCPListener, ep endpoint, wg *sync.WaitGroup, stderr io.Writer) error {
	for {
		c, err := ln.AcceptTCP()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s listener: accept: %w", ep.name, err)
		}
		wg.Go(func() {
			if err := answer(c, ep.reply(c)); err != nil {
				fmt.Fprintf(stderr, "testproxy: %s listener: %v\n", ep.name, err)
			}
		})
	}
}

// answer writes line, half-closes, then drains the peer until it closes too.
// Draining matters for peers that sent data (curl, nc): closing with unread
// input would send a RST that can destroy the line before they read it.
func answer(c *net.TCPConn, line string) error {
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return fmt.Errorf("answer %s: %w", c.RemoteAddr(), err)
	}
	if _, err := io.WriteString(c, line); err != nil {
		return fmt.Errorf("answer %s: %w", c.RemoteAddr(), err)
	}
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("answer %s: %w", c.RemoteAddr(), err)
	}
	_, _ = io.Copy(io.Discard, c) // best effort; the line is already sent
	return nil
}

// writeReadyFile writes "listener=<name> addr=<ip:port>" lines via a temp file
// and rename, so a waiter never sees a partial file.
func writeReadyFile(path string, eps []endpoint, lns []*net.TCPListener) error {
	var b strings.Builder
	for i, ln := range lns {
		fmt.Fprintf(&b, "listener=%s addr=%s\n", eps[i].name, ln.Addr())
	}
	return writeAtomic(path, b.String())
}

// writeAtomic writes a ready file by rename, so a reader never sees it
// half-written.
func writeAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*")
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	_, err = tmp.WriteString(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h;
// x/sys/unix does not export it. It has the same value as SO_ORIGINAL_DST.
const ip6tSOOriginalDst = 80

// originalDst asks conntrack for the destination the peer originally dialled
// before NAT (iptables REDIRECT) rewrote it. The kernel answers ENOENT when
// conntrack has no entry for the connection. When it has one but no NAT
// happened, the answer is simply the local address.
//
// A v4 connection accepted on a dual-stack socket has a v4-mapped local
// address, but its conntrack entry is IPv4, so the level follows the address
// family of the connection, not of the socket.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", err)
	}
	v4 := plainAddrPort(c.LocalAddr()).Addr().Is4()
	var orig netip.AddrPort
	var opErr error
	err = raw.Control(func(fd uintptr) {
		if v4 {
			orig, opErr = originalDst4(int(fd))
		} else {
			orig, opErr = originalDst6(int(fd))
		}
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original dst: %w", err)
	}
	return orig, nil
}

// originalDst4 reads a struct sockaddr_in (16 bytes). x/sys/unix has no typed
// getter for it, so it borrows the 20-byte ip_mreqn getter: the kernel only
// needs the buffer to be at least 16 bytes and fills the first 16.
func originalDst4(fd int) (netip.AddrPort, error) {
	m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt(SOL_IP, SO_ORIGINAL_DST): %w", err)
	}
	b := m.Multiaddr[:]
	// sockaddr_in: sin_family (host order), sin_port (network order), sin_addr.
	if family := binary.NativeEndian.Uint16(b[0:2]); family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST returned family %d, want AF_INET", family)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}

// originalDst6 reads a struct sockaddr_in6 (28 bytes) through the getter for
// struct ip6_mtuinfo, whose first field is exactly a sockaddr_in6.
func originalDst6(fd int) (netip.AddrPort, error) {
	info, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSOOriginalDst)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST): %w", err)
	}
	sa := info.Addr
	if sa.Family != unix.AF_INET6 {
		return netip.AddrPort{}, fmt.Errorf("IP6T_SO_ORIGINAL_DST returned family %d, want AF_INET6", sa.Family)
	}
	var port [2]byte
	binary.NativeEndian.PutUint16(port[:], sa.Port) // stored in network order
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), binary.BigEndian.Uint16(port[:])), nil
}
