package legacy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// Holds says whether the calling thread's network namespace holds exactly
// rs, as Write and iptables-legacy-restore lay it out: each of rs's tables
// byte for byte (the kernel's counters aside), every other table the
// namespace has fresh. It reads only the tables the kernel lists for the
// namespace (reading one makes it), and takes no lock: each table is one
// read. fp hashes the tables compared; it is the same for every namespace
// that holds rs. A namespace holding anything else is no error: ok is
// false, and iptables-legacy-save tells what it holds.
func Holds(rs *iptables.Ruleset) (fp [sha256.Size]byte, ok bool, err error) {
	if !procNetFollowsSetns() {
		return fp, false, nil
	}
	a := abiOf(rs.Family)
	names, err := tableNames(rs.Family)
	if err != nil {
		return fp, false, fmt.Errorf("%s: %w", rs.Family, err)
	}
	want := rs.Tables()
	for _, t := range want {
		if !slices.Contains(names, t) {
			return fp, false, nil
		}
	}
	s, err := open(a)
	if err != nil {
		return fp, false, fmt.Errorf("%s: %w", rs.Family, err)
	}
	defer s.close()
	h := sha256.New()
	for _, table := range names {
		t, err := s.get(table)
		if err != nil {
			return fp, false, fmt.Errorf("%s: %w", rs.Family, err)
		}
		if !slices.Contains(want, table) {
			if _, err := t.fresh(a); err != nil {
				return fp, false, nil
			}
			continue
		}
		l, err := compile(a, table, t.hooks(), rs)
		if err != nil {
			return fp, false, fmt.Errorf("%s %s table: %w", rs.Family, table, err)
		}
		if !t.is(l) {
			return fp, false, nil
		}
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", table, len(l.entries))
		_, _ = h.Write(l.entries)
	}
	h.Sum(fp[:0])
	return fp, true, nil
}

// procNetFollowsSetns: before Linux 5.1 a thread's /proc/thread-self/net
// could show the namespace it was in before a setns (its dentry cached;
// "proc: fix /proc/net/* after setns(2)"), and a table missing from that
// list would go unread. There Holds says no, and iptables-legacy-save, a
// process of its own, reads the namespace.
var procNetFollowsSetns = sync.OnceValue(func() bool {
	var u unix.Utsname
	return unix.Uname(&u) == nil && kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 1)
})

// kernelAtLeast says whether a kernel release ("6.1.0-13-amd64") is
// major.minor or later; one it cannot read is not.
func kernelAtLeast(release string, major, minor int) bool {
	maj, rest, _ := strings.Cut(release, ".")
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		rest = rest[:end]
	}
	m, err1 := strconv.Atoi(maj)
	n, err2 := strconv.Atoi(rest)
	if err1 != nil || err2 != nil {
		return false
	}
	return m > major || (m == major && n >= minor)
}

// tableNames lists the family's tables in the calling thread's network
// namespace (/proc's ip_tables_names, as iptables-legacy-save lists them):
// none when the kernel has no x_tables for the family.
func tableNames(f iptables.Family) ([]string, error) {
	file := "/proc/thread-self/net/ip_tables_names"
	if f == iptables.IPv6 {
		file = "/proc/thread-self/net/ip6_tables_names"
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := strings.Fields(string(b))
	slices.Sort(names)
	return names, nil
}
