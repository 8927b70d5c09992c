// Package xtinfo lays out the x_tables extensions the rule model uses as
// the kernel's uapi structs (linux/netfilter/xt_*.h), with XT_ALIGN
// padding to 8 bytes: the name, revision and info blob of each match and
// target, as iptables 1.8 sends them. Both kernel writers carry them: the
// nf_tables one in its xt compat expressions (pkg/iptables/nfnl), the
// legacy one in its x_tables entries (pkg/iptables/legacy).
// Host-endian fields are host-endian here too; ports and addresses are
// network order.
package xtinfo

import (
	"encoding/binary"
	"errors"
	"fmt"

	"istio-cni.local/istio-cni/pkg/iptables"
)

var ne = binary.NativeEndian

// ErrUnsupported means a rule has a part no extension here lays out.
var ErrUnsupported = errors.New("no x_tables extension for it")

// Ext is an extension as a rule carries it.
type Ext struct {
	Name string
	Rev  uint8
	Info []byte
}

// Match is the extension of a match. Ports are the tcp or udp match;
// nf_tables layouts may match some natively instead.
func Match(m iptables.Match) (Ext, error) {
	switch m := m.(type) {
	case iptables.DPort:
		return Ext{m.Proto.String(), 0, portInfo(m.Proto, true, m.Port, m.Not)}, nil
	case iptables.SPort:
		return Ext{m.Proto.String(), 0, portInfo(m.Proto, false, m.Port, false)}, nil
	case iptables.Mark:
		return Ext{"mark", 1, markInfo(m)}, nil
	case iptables.Owner:
		return Ext{"owner", 1, ownerInfo(m)}, nil
	case iptables.Tag:
		return Ext{"comment", 0, commentInfo(iptables.RuleTag)}, nil
	case iptables.NotDPorts:
		info, err := multiportInfo(m)
		return Ext{"multiport", 1, info}, err
	case iptables.ConnMark:
		return Ext{"connmark", 1, connmarkInfo(m.Value)}, nil
	case iptables.Established:
		return Ext{"conntrack", 3, conntrackStateInfo(ctStateEstablished | ctStateRelated)}, nil
	case iptables.InvalidState:
		return Ext{"conntrack", 3, conntrackStateInfo(ctStateInvalid)}, nil
	}
	return Ext{}, fmt.Errorf("match %T: %w", m, ErrUnsupported)
}

// Target is the extension of a target that is not a verdict (a jump,
// RETURN, ACCEPT or DROP: each writer's own).
func Target(fam iptables.Family, t iptables.Target) (Ext, error) {
	switch t := t.(type) {
	case iptables.Redirect:
		return Ext{"REDIRECT", 0, redirectInfo(fam, t.ToPort)}, nil
	case iptables.SetMark:
		return Ext{"MARK", 2, markTargetInfo(t.Value)}, nil
	case iptables.ConnMarkSave:
		return Ext{"CONNMARK", 2, connmarkTargetInfo(connmarkSave)}, nil
	case iptables.ConnMarkRestore:
		return Ext{"CONNMARK", 2, connmarkTargetInfo(connmarkRestore)}, nil
	case iptables.TProxy:
		if t.V6 != (fam == iptables.IPv6) {
			return Ext{}, fmt.Errorf("TPROXY of the other family: %w", ErrUnsupported)
		}
		return Ext{"TPROXY", 1, tproxyInfo(t)}, nil
	case iptables.CT:
		return Ext{"CT", 2, ctInfo(t.Zone)}, nil
	}
	return Ext{}, fmt.Errorf("target %T: %w", t, ErrUnsupported)
}

// ownerInfo is struct xt_owner_match_info (revision 1).
func ownerInfo(m iptables.Owner) []byte {
	const matchUID, matchGID = 1, 2
	b := make([]byte, 24)
	flag := byte(matchUID)
	if m.Kind == iptables.GID {
		flag = matchGID
		ne.PutUint32(b[8:], m.ID)
		ne.PutUint32(b[12:], m.ID)
	} else {
		ne.PutUint32(b[0:], m.ID)
		ne.PutUint32(b[4:], m.ID)
	}
	b[16] = flag
	if m.Not {
		b[17] = flag
	}
	return b
}

// commentInfo is struct xt_comment_info: 256 bytes of NUL-terminated text.
func commentInfo(s string) []byte {
	b := make([]byte, 256)
	copy(b[:255], s)
	return b
}

// multiportInfo is struct xt_multiport_v1 for "! --dports".
func multiportInfo(m iptables.NotDPorts) ([]byte, error) {
	const maxPorts, destination = 15, 1
	if len(m.Ports) == 0 || len(m.Ports) > maxPorts {
		return nil, fmt.Errorf("multiport with %d ports: %w", len(m.Ports), ErrUnsupported)
	}
	b := make([]byte, 48)
	b[0] = destination
	b[1] = byte(len(m.Ports)) // #nosec G115 -- at most maxPorts
	for i, p := range m.Ports {
		ne.PutUint16(b[2+2*i:], p)
	}
	b[47] = 1 // invert
	return b, nil
}

// portInfo is struct xt_tcp or struct xt_udp for one port: the other
// end's range is all ports. Both are 16 bytes once aligned, with invflags
// at 11 (tcp, after option and the flag masks) or 8 (udp).
func portInfo(p iptables.Proto, dst bool, port uint16, not bool) []byte {
	const invSrc, invDst = 1, 2
	b := make([]byte, 16)
	ne.PutUint16(b[2:], 0xffff)
	ne.PutUint16(b[6:], 0xffff)
	at, inv := 0, byte(invSrc)
	if dst {
		at, inv = 4, invDst
	}
	ne.PutUint16(b[at:], port)
	ne.PutUint16(b[at+2:], port)
	if not {
		invAt := 8
		if p == iptables.TCP {
			invAt = 11
		}
		b[invAt] = inv
	}
	return b
}

// markInfo is struct xt_mark_mtinfo1 for "--mark value" (all bits).
func markInfo(m iptables.Mark) []byte {
	b := make([]byte, 16)
	ne.PutUint32(b[0:], m.Value)
	ne.PutUint32(b[4:], 0xffffffff)
	if m.Not {
		b[8] = 1
	}
	return b
}

// connmarkInfo is struct xt_connmark_mtinfo1.
func connmarkInfo(mark uint32) []byte {
	b := make([]byte, 16)
	ne.PutUint32(b[0:], mark)
	ne.PutUint32(b[4:], 0xffffffff)
	return b
}

// Conntrack states (XT_CONNTRACK_STATE_BIT).
const (
	ctStateInvalid     = 1 << 0
	ctStateEstablished = 1 << 1
	ctStateRelated     = 1 << 2
)

// conntrackStateInfo is struct xt_conntrack_mtinfo3 matching --ctstate.
func conntrackStateInfo(states uint16) []byte {
	const matchState = 1
	b := make([]byte, 168)
	ne.PutUint16(b[146:], matchState) // match_flags
	ne.PutUint16(b[150:], states)     // state_mask
	return b
}

// redirectInfo is REDIRECT's range to one port: struct
// nf_nat_ipv4_multi_range_compat for IPv4, struct nf_nat_range for IPv6.
func redirectInfo(fam iptables.Family, port uint16) []byte {
	const protoSpecified = 2
	if fam == iptables.IPv6 {
		b := make([]byte, 40)
		ne.PutUint32(b[0:], protoSpecified)
		binary.BigEndian.PutUint16(b[36:], port)
		binary.BigEndian.PutUint16(b[38:], port)
		return b
	}
	b := make([]byte, 24)
	ne.PutUint32(b[0:], 1) // rangesize
	ne.PutUint32(b[4:], protoSpecified)
	binary.BigEndian.PutUint16(b[16:], port)
	binary.BigEndian.PutUint16(b[18:], port)
	return b
}

// markTargetInfo is struct xt_mark_tginfo2 (--set-xmark value/0xffffffff).
func markTargetInfo(mark uint32) []byte {
	b := make([]byte, 8)
	ne.PutUint32(b[0:], mark)
	ne.PutUint32(b[4:], 0xffffffff)
	return b
}

const (
	connmarkSave    = 1
	connmarkRestore = 2
)

// connmarkTargetInfo is struct xt_connmark_tginfo2 with full masks.
func connmarkTargetInfo(mode byte) []byte {
	b := make([]byte, 16)
	ne.PutUint32(b[4:], 0xffffffff) // ctmask
	ne.PutUint32(b[8:], 0xffffffff) // nfmask
	b[14] = mode
	return b
}

// tproxyInfo is struct xt_tproxy_target_info_v1 with the unspecified
// local address.
func tproxyInfo(t iptables.TProxy) []byte {
	b := make([]byte, 32)
	ne.PutUint32(b[0:], 0xffffffff) // mark_mask
	ne.PutUint32(b[4:], t.Mark)
	binary.BigEndian.PutUint16(b[24:], t.Port)
	return b
}

// ctInfo is struct xt_ct_target_info_v1 with only a zone.
func ctInfo(zone uint16) []byte {
	b := make([]byte, 72)
	ne.PutUint16(b[2:], zone)
	return b
}
