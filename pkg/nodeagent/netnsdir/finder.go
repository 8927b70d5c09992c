// Package netnsdir finds started pods' network namespaces on the node
// without touching any process: containerd and CRI-O bind every sandbox's
// namespace to a file in the node's netns directory (/var/run/netns), and a
// pod's namespace is the one whose interfaces hold the pod's addresses.
//
// Opening such a file needs no ptrace access to anyone (the node agent holds
// no CAP_SYS_PTRACE and no host /proc: through /proc/<pid>/root those would
// give it every host file, writable); reading its addresses needs setns,
// CAP_SYS_ADMIN. A process that can add another pod's address to its own
// interfaces could pose as that pod, so an address found in two namespaces
// matches neither; and an address two pods claim (a pod whose reported
// address was given to another after its sandbox went) matches neither pod.
// Such pods are reported as ambiguous, never checked against the wrong
// namespace.
package netnsdir

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/podnet/nsthread"
)

// NSFile is one sandbox's network namespace, as the file the runtime
// bound it to (not to be confused with podnet.Network, which programs one).
type NSFile struct {
	// Path is the namespace's file in the netns directory, usable with
	// setns while the sandbox lives.
	Path string
	// Inode identifies the namespace: a new sandbox of the same pod has a
	// new one.
	Inode uint64
}

// Finder reads a netns directory: the node's own, or the host's mounted
// into the agent's container (with mountPropagation HostToContainer, so
// namespaces bound after the agent started are seen).
type Finder struct {
	Dir string
	// Since is when the agent started: a file in Dir that is not a
	// namespace, is newer, was not bound within bindGrace and is still
	// unbound at the next scan means the agent's view of Dir no longer
	// receives the host's mounts (Stale).
	Since time.Time
	// unbound are the files the last scan found so (NewFinder); nil: a
	// file counts at its first scan.
	unbound *unboundFiles
}

// NewFinder returns a Finder that remembers, from one scan to the next,
// the files it found unbound: a runtime tearing a sandbox down unbinds its
// namespace and then removes the file, and a scan can fall between.
func NewFinder(dir string, since time.Time) Finder {
	return Finder{Dir: dir, Since: since, unbound: &unboundFiles{}}
}

type unboundFiles struct {
	mu   sync.Mutex
	last map[string]fileKey // by path
}

// fileKey tells one file from another made at the same path since.
type fileKey struct {
	ino   uint64
	mtime time.Time
}

// stale counts the files found unbound now that the last scan found
// unbound too, and remembers now's.
func (u *unboundFiles) stale(now map[string]fileKey) int {
	if u == nil {
		return len(now)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for path, k := range now {
		if u.last[path] == k {
			n++
		}
	}
	u.last = now
	return n
}

// bindGrace is how long a new file may stay unbound before it means a
// stale view: a runtime creates a namespace's file and binds the namespace
// to it just after, and a scan can fall between.
const bindGrace = 10 * time.Second

// Result is what one scan found.
type Result struct {
	// Found maps a pod's UID to its namespace.
	Found map[string]NSFile
	// Ambiguous pods (by UID) are matched to no namespace, and why: an
	// address is in more than one namespace, or another pod claims it.
	Ambiguous map[string]string
	// Stale counts files newer than Since that are not namespaces.
	Stale int
}

// Find maps each pod (UID → its addresses, as the API reports them) to the
// one namespace in Dir that holds all of them. Pods without addresses are
// left out. pods should hold every pod on the node that may hold an
// address, not only those the caller checks: that is how two pods claiming
// one address are told.
func (f Finder) Find(pods map[string][]netip.Addr) (Result, error) {
	res := Result{Found: map[string]NSFile{}, Ambiguous: map[string]string{}}
	entries, err := os.ReadDir(f.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("reading %s: %w", f.Dir, err)
	}
	owners := map[netip.Addr][]NSFile{}
	unbound := map[string]fileKey{}
	// One thread moves from namespace to namespace: one setns and one
	// socket a file (a netlink handle made at each namespace switched six
	// times and opened three sockets).
	err = nsthread.Run(func() error {
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			path := filepath.Join(f.Dir, e.Name())
			ns, addrs, key, ok := f.read(path)
			if key != nil {
				unbound[path] = *key
			}
			if !ok {
				continue
			}
			for _, a := range addrs {
				owners[a] = append(owners[a], ns)
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("reading %s: %w", f.Dir, err)
	}
	res.Stale = f.unbound.stale(unbound)
	res.Ambiguous = ClaimedTwice(pods)
	for uid, ips := range pods {
		if _, ok := res.Ambiguous[uid]; ok || len(ips) == 0 {
			continue
		}
		match, ambiguous := matchAll(ips, owners)
		switch {
		case ambiguous:
			res.Ambiguous[uid] = "its addresses are held by more than one network namespace (one poses as it?)"
		case match != nil:
			res.Found[uid] = *match
		}
	}
	return res, nil
}

// ClaimedTwice returns the pods (by UID) one of whose addresses another pod
// claims too, and why: no namespace can be proven theirs by its address.
func ClaimedTwice(pods map[string][]netip.Addr) map[string]string {
	claims := map[netip.Addr][]string{}
	for uid, ips := range pods {
		for _, ip := range ips {
			claims[ip.Unmap()] = append(claims[ip.Unmap()], uid)
		}
	}
	out := map[string]string{}
	for uid, ips := range pods {
	next:
		for _, ip := range ips {
			for _, other := range claims[ip.Unmap()] {
				if other != uid {
					out[uid] = fmt.Sprintf("its address %s is also claimed by pod %s", ip.Unmap(), other)
					break next
				}
			}
		}
	}
	return out
}

// matchAll returns the one namespace that holds every address, or reports
// that some address is held by more than one.
func matchAll(ips []netip.Addr, owners map[netip.Addr][]NSFile) (*NSFile, bool) {
	var match *NSFile
	for _, ip := range ips {
		held := owners[ip.Unmap()]
		switch {
		case len(held) > 1:
			return nil, true
		case len(held) == 0:
			return nil, false
		case match != nil && match.Inode != held[0].Inode:
			return nil, false
		}
		match = &held[0]
	}
	return match, false
}

// read opens one file: a namespace's inode and the addresses on its
// interfaces, or ok=false for anything else (a file whose namespace is
// gone, or one this view does not see bound: unbound says which file, if
// it may mean a stale view). It leaves the calling thread in that
// namespace (nsthread.Run brings it home).
func (f Finder) read(path string) (ns NSFile, addrs []netip.Addr, unbound *fileKey, ok bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ns, nil, nil, false
	}
	defer func() { _ = unix.Close(fd) }()
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if unix.Fstatfs(fd, &sfs) != nil || unix.Fstat(fd, &st) != nil {
		return ns, nil, nil, false
	}
	if sfs.Type != unix.NSFS_MAGIC { // not a bound namespace
		mtime := time.Unix(st.Mtim.Unix())
		if !f.Since.IsZero() && mtime.After(f.Since) && time.Since(mtime) > bindGrace {
			return ns, nil, &fileKey{ino: st.Ino, mtime: mtime}, false
		}
		return ns, nil, nil, false
	}
	if unix.Setns(fd, unix.CLONE_NEWNET) != nil {
		return ns, nil, nil, false
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return ns, nil, nil, false
	}
	defer h.Close()
	list, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return ns, nil, nil, false
	}
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			addrs = append(addrs, ip.Unmap())
		}
	}
	return NSFile{Path: path, Inode: st.Ino}, addrs, nil, true
}

// Inode is the inode of an open namespace file, for callers that hold one
// open and must know it is still the namespace they found.
func Inode(f *os.File) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
