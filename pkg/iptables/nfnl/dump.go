package nfnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errChanged: the ruleset changed while it was being dumped, so the
// replies are not one state of it.
var errChanged = errors.New("nf_tables changed during the dump")

// dumpTimeout bounds a dump's wait for the kernel (SO_RCVTIMEO).
const dumpTimeout = 5 * time.Second

// dump runs one NLM_F_DUMP request and returns each reply's attributes. A dump the
// kernel flags as interrupted by a change (NLM_F_DUMP_INTR) is errChanged.
func (c *conn) dump(typ uint16, family uint8) ([][]byte, error) {
	return c.request(typ, family, unix.NLM_F_DUMP, nil)
}

// request sends one request, with attributes (a dump's filter) or none,
// and returns its replies up to the dump's end or the ack (a request that
// is not a dump must ask for one).
func (c *conn) request(typ uint16, family uint8, flags uint16, payload []byte) ([][]byte, error) {
	req := frame(nil, unix.NFNL_SUBSYS_NFTABLES<<8|typ, unix.NLM_F_REQUEST|flags, 1, family, 0, payload)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, os.NewSyscallError("sendto(NETLINK_NETFILTER)", err)
	}
	var out [][]byte
	interrupted := false
	if c.buf == nil {
		// The kernel fills a dump's datagrams up to 32 KiB.
		c.buf = make([]byte, 1<<16)
	}
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, os.NewSyscallError("recvfrom(NETLINK_NETFILTER)", err)
		}
		nms, err := syscall.ParseNetlinkMessage(c.buf[:n])
		if err != nil {
			return nil, fmt.Errorf("a malformed dump reply: %w", err)
		}
		for _, nm := range nms {
			interrupted = interrupted || nm.Header.Flags&unix.NLM_F_DUMP_INTR != 0
			switch nm.Header.Type {
			case unix.NLMSG_DONE:
				// A dump that failed part-way says so here.
				if len(nm.Data) >= 4 {
					if errno := errnoOf(nm.Data); errno != 0 {
						return nil, errno
					}
				}
				if interrupted {
					return nil, errChanged
				}
				return out, nil
			case unix.NLMSG_ERROR:
				if errno := errnoOf(nm.Data); errno != 0 {
					return nil, errno
				}
				return out, nil
			}
			if len(nm.Data) >= nfgenLen {
				out = append(out, append([]byte(nil), nm.Data[nfgenLen:]...))
			}
		}
	}
}

// generation returns the namespace's ruleset generation, which every
// committed transaction advances.
func (c *conn) generation() (uint32, error) {
	msgs, err := c.request(unix.NFT_MSG_GETGEN, unix.AF_UNSPEC, unix.NLM_F_ACK, nil)
	if err != nil {
		return 0, fmt.Errorf("reading the ruleset generation: %w", err)
	}
	for _, m := range msgs {
		for _, a := range parseAttrs(m) {
			if a.typ == unix.NFTA_GEN_ID && len(a.value) == 4 {
				return binary.BigEndian.Uint32(a.value), nil
			}
		}
	}
	return 0, errors.New("reading the ruleset generation: no NFTA_GEN_ID in the reply")
}
