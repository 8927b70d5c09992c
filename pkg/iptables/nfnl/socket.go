package nfnl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// msg is one nfnetlink message before framing.
type msg struct {
	typ    uint16 // NFT_MSG_*
	flags  uint16 // beyond NLM_F_REQUEST and NLM_F_ACK
	family uint8
	attrs  []byte
}

const (
	nlmsgHdrLen = unix.SizeofNlMsghdr
	nfgenLen    = 4
)

// frame appends one netlink message: header, nfgenmsg, attributes.
func frame(b []byte, typ, flags uint16, seq uint32, family uint8, resID uint16, payload []byte) []byte {
	n := nlmsgHdrLen + nfgenLen + len(payload)
	b = binary.NativeEndian.AppendUint32(b, uint32(n)) // #nosec G115 -- a message is at most a few kilobytes
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, family, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, resID)
	return append(b, payload...)
}

// conn is a NETLINK_NETFILTER socket. It belongs to the network namespace
// of the thread that opened it, for its whole life.
type conn struct {
	fd  int
	buf []byte // a dump's receive buffer, made at its first
}

func dial() (*conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, os.NewSyscallError("socket(NETLINK_NETFILTER)", err)
	}
	// Acks carry only the failing message's header, and errors say why.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	// Only dumps wait for replies; the kernel always answers them, but a
	// reader on a pod's thread must never hang there.
	tv := unix.NsecToTimeval(dumpTimeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("bind(NETLINK_NETFILTER)", err)
	}
	return &conn{fd: fd}, nil
}

func (c *conn) close() { _ = unix.Close(c.fd) }

// KernelError is the kernel's refusal of one message of a transaction,
// or of the transaction as a whole; nothing of it was committed.
type KernelError struct {
	Op  string // what the message did, for the reader
	Err unix.Errno
	Ext string // the kernel's extended ack message, if any
}

func (e *KernelError) Error() string {
	s := fmt.Sprintf("nf_tables refused %s: %v", e.Op, e.Err)
	if e.Ext != "" {
		s += " (" + e.Ext + ")"
	}
	return s
}

func (e *KernelError) Unwrap() error { return e.Err }

// ErrUnknownOutcome means the replies to a transaction were lost (the
// socket's buffer overflowed, or they were not all there), so whether it
// was committed is unknown: the caller must read the namespace back.
var ErrUnknownOutcome = errors.New("nf_tables transaction: outcome unknown")

// transact sends msgs as one nf_tables transaction: all of them apply, or
// none. nfnetlink processes a batch inside the sending call, so when
// sendto returns every reply is queued: any error, including those the
// kernel addresses to the batch as a whole (a failed commit, a missing
// capability, memory), and an ack of the last message, the only one that
// asks for it. The kernel reads a batch message by message to its end
// (BATCH_END, which every batch here carries: one without it is only
// validated, and acked) and reports every failing one, so that ack and no
// error mean every message applied and the batch committed (outcome). An
// ack per message cost the kernel an ack each and us a receive each,
// about 35 µs for a pod's rules; iptables-nft asks for none and takes
// silence as success. The replies are read without blocking.
func (c *conn) transact(msgs []msg, ops []func() string) error {
	return c.transactAt(0, msgs, ops)
}

// transactAt is transact bound to the ruleset generation gen (0: none):
// if any transaction committed since gen, the kernel refuses the whole
// batch before its first message with ERESTART (errors.Is).
// Kernels older than NFNL_BATCH_GENID skip the batch's attributes.
func (c *conn) transactAt(gen uint32, msgs []msg, ops []func() string) error {
	const seq0 = 1
	last := len(msgs) - 1
	var begin attrs
	if gen != 0 {
		begin.u32(unix.NFNL_BATCH_GENID, gen)
	}
	b := frame(nil, unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, seq0, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, begin.b)
	for i, m := range msgs {
		flags := unix.NLM_F_REQUEST | m.flags
		if i == last {
			flags |= unix.NLM_F_ACK
		}
		b = frame(b, unix.NFNL_SUBSYS_NFTABLES<<8|m.typ, flags,
			uint32(seq0+1+i), m.family, 0, m.attrs) // #nosec G115 -- a few hundred messages
	}
	b = frame(b, unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, uint32(seq0+1+len(msgs)), unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES, nil) // #nosec G115 -- a few hundred messages
	// Room for an error from every message: each is a buffer of its own
	// in the socket's queue, about 1 KiB, and the default holds some 200.
	_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, (len(msgs)+64)*2048)
	if err := unix.Sendto(c.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return os.NewSyscallError("sendto(NETLINK_NETFILTER)", err)
	}
	var replies []reply
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil { // ENOBUFS: replies were dropped
			return errors.Join(outcomeErrors(replies, len(msgs), ops), fmt.Errorf("%w: %w", ErrUnknownOutcome, os.NewSyscallError("recvfrom(NETLINK_NETFILTER)", err)))
		}
		nms, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("%w: a malformed reply: %w", ErrUnknownOutcome, err)
		}
		for _, nm := range nms {
			if nm.Header.Type == unix.NLMSG_ERROR && len(nm.Data) >= 4 {
				replies = append(replies, reply{i: int(nm.Header.Seq) - seq0 - 1, errno: errnoOf(nm.Data), ext: extAck(nm)})
			}
		}
	}
	return outcome(replies, len(msgs), ops)
}

// reply is one of the kernel's NLMSG_ERRORs: an ack (errno 0) or an
// error, for the message at index i of the transaction (the batch's own
// messages are outside 0..n-1).
type reply struct {
	i     int
	errno unix.Errno
	ext   string
}

// outcome judges a transaction of n messages by the kernel's replies: any
// error fails it (nothing was committed); otherwise the last message's ack
// says every message applied and the batch committed; without it the
// outcome is unknown.
func outcome(replies []reply, n int, ops []func() string) error {
	if err := outcomeErrors(replies, n, ops); err != nil {
		return err
	}
	for _, r := range replies {
		if r.i == n-1 && r.errno == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: no ack of the transaction's last message", ErrUnknownOutcome)
}

// outcomeErrors is the replies' errors, named.
func outcomeErrors(replies []reply, n int, ops []func() string) error {
	var errs []error
	for _, r := range replies {
		i := r.i
		switch {
		case i < 0 || i >= n:
			// The batch as a whole: nothing was committed.
			errno := r.errno
			if errno == 0 {
				errno = unix.EPROTO
			}
			errs = append(errs, &KernelError{Op: "the transaction", Err: errno, Ext: r.ext})
		case r.errno != 0:
			errs = append(errs, &KernelError{Op: ops[i](), Err: r.errno, Ext: r.ext})
		}
	}
	return errors.Join(errs...)
}

// errnoOf reads an NLMSG_ERROR's error: 0 for an ack, else the negated
// errno.
func errnoOf(data []byte) unix.Errno {
	code := int64(int32(binary.NativeEndian.Uint32(data))) // #nosec G115 -- the kernel's int, sign and all
	if code >= 0 {
		return 0
	}
	return unix.Errno(-code)
}

// extAck returns the kernel's NLMSGERR_ATTR_MSG of an error message sent
// with NLM_F_ACK_TLVS.
func extAck(nm syscall.NetlinkMessage) string {
	if nm.Header.Flags&unix.NLM_F_ACK_TLVS == 0 {
		return ""
	}
	// errno, then the request's header (capped), then the TLVs.
	off := 4 + nlmsgHdrLen
	if off > len(nm.Data) {
		return ""
	}
	for _, a := range parseAttrs(nm.Data[off:]) {
		if a.typ == unix.NLMSGERR_ATTR_MSG {
			return string(trimNul(a.value))
		}
	}
	return ""
}

func trimNul(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
