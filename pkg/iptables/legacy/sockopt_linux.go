package legacy

import (
	"bytes"
	"fmt"
	"math/bits"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// The socket options of ip_tables and ip6_tables (IPT_BASE_CTL), the same
// numbers at SOL_IP and SOL_IPV6.
const (
	soSetReplace     = 64
	soSetAddCounters = 65
	soGetInfo        = 64
	soGetEntries     = 65
)

// The headers of the structures the options carry: struct ipt_getinfo,
// ipt_get_entries, ipt_replace and xt_counters_info (the IPv6 ones are
// alike), each before its flexible array.
const (
	tableNameLen   = 32
	getInfoLen     = 84
	getEntriesHead = 40
	replaceHead    = 96
	countersHead   = 40
	counterLen     = 16 // struct xt_counters
)

// sock is a raw socket of the family, in the calling thread's namespace.
type sock struct {
	fd    int
	level int
	a     abi
}

func open(a abi) (*sock, error) {
	domain, level := unix.AF_INET, unix.SOL_IP
	if a.fam == iptables.IPv6 {
		domain, level = unix.AF_INET6, unix.SOL_IPV6
	}
	fd, err := unix.Socket(domain, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("opening an x_tables socket: %w", err)
	}
	return &sock{fd: fd, level: level, a: a}, nil
}

func (s *sock) close() { _ = unix.Close(s.fd) }

// kernelTable is a table as the kernel gave it.
type kernelTable struct {
	validHooks         uint32
	hookEntry, hookEnd [numHooks]uint32
	num                int
	// entries are as read, with each entry's counters and comefrom
	// (the kernel's own) zeroed.
	entries []byte
}

// get reads a table; the kernel makes it in this namespace on first use.
func (s *sock) get(table string) (*kernelTable, error) {
	info := make([]byte, getInfoLen)
	copy(info, table)
	if err := s.getsockopt(soGetInfo, info); err != nil {
		return nil, fmt.Errorf("reading the %s table's size: %w", table, err)
	}
	t := &kernelTable{validHooks: ne.Uint32(info[32:]), num: int(ne.Uint32(info[76:]))}
	for h := range numHooks {
		t.hookEntry[h] = ne.Uint32(info[36+4*h:])
		t.hookEnd[h] = ne.Uint32(info[56+4*h:])
	}
	size := ne.Uint32(info[80:])
	get := make([]byte, getEntriesHead+int(size))
	copy(get, table)
	ne.PutUint32(get[tableNameLen:], size)
	if err := s.getsockopt(soGetEntries, get); err != nil {
		return nil, fmt.Errorf("reading the %s table: %w", table, err)
	}
	t.entries = get[getEntriesHead:]
	for at := 0; at < len(t.entries); {
		if at+s.a.entry > len(t.entries) {
			return nil, fmt.Errorf("the %s table ends inside an entry at %d", table, at)
		}
		next := int(ne.Uint16(t.entries[at+s.a.ipLen+6:]))
		if next < s.a.entry || at+next > len(t.entries) {
			return nil, fmt.Errorf("the %s table's entry at %d is %d bytes", table, at, next)
		}
		clear(t.entries[at+s.a.ipLen+8 : at+s.a.ipLen+12]) // comefrom
		clear(t.entries[at+s.a.entry-counterLen : at+s.a.entry])
		at += next
	}
	return t, nil
}

// fresh returns the table's hooks if it holds just its empty built-in
// chains with ACCEPT policies: exactly what compile lays out for no rules.
func (t *kernelTable) fresh(a abi) ([]int, error) {
	hooks := t.hooks()
	empty, err := compile(a, "", hooks, &iptables.Ruleset{Family: a.fam})
	if err != nil {
		return nil, err
	}
	if !t.is(empty) {
		return nil, fmt.Errorf("%w: %d entries for %d built-in chains", ErrNotFresh, t.num, bits.OnesCount32(t.validHooks))
	}
	return hooks, nil
}

// hooks are the table's built-in chains, by hook.
func (t *kernelTable) hooks() []int {
	var hooks []int
	for h := range numHooks {
		if t.validHooks&(1<<h) != 0 {
			hooks = append(hooks, h)
		}
	}
	return hooks
}

// is says whether the table holds exactly l (counters aside).
func (t *kernelTable) is(l *layout) bool {
	same := t.num == l.num && bytes.Equal(t.entries, l.entries)
	for _, h := range t.hooks() {
		same = same && t.hookEntry[h] == l.hookEntry[h] && t.hookEnd[h] == l.hookEnd[h]
	}
	return same
}

// replace puts l in place of was, then carries the built-in chains'
// policy counters over, as libiptc's commit does. Once the rules are in,
// a failure to carry the counts is no failure of the write: they count
// packets only.
func (s *sock) replace(table string, was *kernelTable, l *layout) error {
	old, err := s.setReplace(table, was.validHooks, l.hookEntry, l.hookEnd, l.num, l.entries, was.num)
	if err != nil {
		return err
	}
	add := make([]byte, countersHead+counterLen*l.num)
	carried := false
	i := 0
	for h := range numHooks {
		if was.validHooks&(1<<h) == 0 {
			continue
		}
		// A fresh table's entries are its policies in hook order.
		c := old[counterLen*i : counterLen*(i+1)]
		i++
		if !bytes.Equal(c, make([]byte, counterLen)) {
			copy(add[countersHead+counterLen*l.policy[h]:], c)
			carried = true
		}
	}
	if !carried {
		return nil
	}
	copy(add, table)
	ne.PutUint32(add[tableNameLen:], uint32(l.num)) // #nosec G115 -- a few hundred entries
	_ = s.setsockopt(soSetAddCounters, add)
	return nil
}

// putBack replaces a table written moments ago (now holding num entries)
// with what it held before.
func (s *sock) putBack(table string, was *kernelTable, num int) error {
	_, err := s.setReplace(table, was.validHooks, was.hookEntry, was.hookEnd, was.num, was.entries, num)
	return err
}

// setReplace replaces a table, which the kernel checks still holds
// oldNum entries (EAGAIN if another writer came first), and returns the
// replaced entries' counters.
func (s *sock) setReplace(table string, validHooks uint32, hookEntry, hookEnd [numHooks]uint32, num int, entries []byte, oldNum int) ([]byte, error) {
	counters := make([]byte, counterLen*max(oldNum, 1))
	b := make([]byte, replaceHead+len(entries))
	copy(b, table)
	ne.PutUint32(b[32:], validHooks)
	ne.PutUint32(b[36:], uint32(num))          // #nosec G115 -- a few hundred entries
	ne.PutUint32(b[40:], uint32(len(entries))) // #nosec G115 -- a few tens of KiB
	for h := range numHooks {
		ne.PutUint32(b[44+4*h:], hookEntry[h])
		ne.PutUint32(b[64+4*h:], hookEnd[h])
	}
	ne.PutUint32(b[84:], uint32(oldNum))                                // #nosec G115 -- as above
	ne.PutUint64(b[88:], uint64(uintptr(unsafe.Pointer(&counters[0])))) // #nosec G103 -- the kernel writes the old counters there
	copy(b[replaceHead:], entries)
	err := s.setsockopt(soSetReplace, b)
	runtime.KeepAlive(counters)
	if err != nil {
		return nil, fmt.Errorf("replacing the %s table: %w", table, err)
	}
	return counters, nil
}

func (s *sock) getsockopt(opt int, b []byte) error {
	n := uint32(len(b)) // #nosec G115 -- our own buffers
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), uintptr(s.level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&n)), 0) // #nosec G103 -- the kernel fills b
	if errno != 0 {
		return errno
	}
	return nil
}

func (s *sock) setsockopt(opt int, b []byte) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(s.fd), uintptr(s.level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0) // #nosec G103 -- the kernel reads b
	if errno != 0 {
		return errno
	}
	return nil
}
