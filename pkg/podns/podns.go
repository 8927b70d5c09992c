// Package podns finds running pods' network namespaces from the node's
// /proc: a pod's processes sit in cgroups named after its UID under every
// kubelet cgroup driver (cgroupfs "pod<uid>", systemd "pod<uid_with_underscores>.slice"),
// and each process's ns/net is a handle on the namespace it runs in. It
// needs no container runtime socket, which would give its holder far more
// than reading namespaces does.
package podns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Netns is one pod's network namespace as seen through one of its
// processes.
type Netns struct {
	// Path is <proc>/<pid>/ns/net: usable with setns while the process
	// lives.
	Path string
	// Inode identifies the namespace: two sightings with the same inode are
	// the same sandbox; a new sandbox of the same pod has a new one.
	Inode uint64
	PID   int
}

// Finder reads a /proc: the node's own, or the host's mounted into the
// agent's container.
type Finder struct {
	Proc string
	// HostNetns is a handle on the host's network namespace; "" means the
	// caller's own (/proc/self/ns/net: the agent runs with hostNetwork).
	HostNetns string
}

// Find scans /proc once and returns the network namespace of each pod UID
// it finds a process for. Pods without a live process (not started, or
// gone) are absent. A process in the host's namespace is never a pod's
// namespace: host-network pods are absent too.
func (f Finder) Find(uids []string) (map[string]Netns, error) {
	want := make(map[string]string, 2*len(uids)) // cgroup marker -> uid
	for _, uid := range uids {
		want["pod"+uid] = uid
		want["pod"+strings.ReplaceAll(uid, "-", "_")] = uid
	}
	hostNetns := f.HostNetns
	if hostNetns == "" {
		hostNetns = "/proc/self/ns/net"
	}
	host, err := inode(hostNetns)
	if err != nil {
		return nil, fmt.Errorf("reading the host's network namespace: %w", err)
	}
	entries, err := os.ReadDir(f.Proc)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", f.Proc, err)
	}
	found := map[string]Netns{}
	started := map[string]uint64{} // the chosen process's start time, by pod
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(f.Proc, e.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup")) // #nosec G304 -- /proc, by design
		if err != nil {
			continue // exited meanwhile
		}
		uid, ok := podOf(cg, want)
		if !ok {
			continue
		}
		// The pod's first process (the sandbox's pause, or the first
		// container where the runtime pins the namespace without one) is
		// in the pod's namespace; a later one may have made a nested
		// namespace (Docker-in-Docker, browser sandboxes).
		start, err := startTime(dir)
		if err != nil {
			continue
		}
		if prev, seen := started[uid]; seen && prev <= start {
			continue
		}
		path := filepath.Join(dir, "ns", "net")
		ino, err := inode(path)
		if err != nil || ino == host {
			continue // a zombie has no namespace; host network is not a pod's
		}
		found[uid] = Netns{Path: path, Inode: ino, PID: pid}
		started[uid] = start
	}
	return found, nil
}

// startTime reads a process's start time (clock ticks since boot, field 22
// of /proc/<pid>/stat).
func startTime(dir string) (uint64, error) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat")) // #nosec G304 -- /proc, by design
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/stat: no command name", dir)
	}
	fields := strings.Fields(string(stat[i+1:]))
	const startField = 22 - 3 // fields[0] is field 3 (state)
	if len(fields) <= startField {
		return 0, fmt.Errorf("%s/stat: %d fields", dir, len(fields)+2)
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}

// podOf finds the pod UID a /proc/<pid>/cgroup names, if wanted. The pod's
// cgroup is a path element "pod<uid>" (cgroupfs) or ends a
// "...-pod<uid>.slice" element (systemd).
func podOf(cgroup []byte, want map[string]string) (string, bool) {
	for line := range bytes.SplitSeq(cgroup, []byte{'\n'}) {
		// hierarchy-ID:controllers:path
		i := bytes.LastIndexByte(line, ':')
		if i < 0 {
			continue
		}
		for elem := range strings.SplitSeq(string(line[i+1:]), "/") {
			elem = strings.TrimSuffix(elem, ".slice")
			if j := strings.LastIndexByte(elem, '-'); j >= 0 && strings.HasPrefix(elem[j+1:], "pod") {
				elem = elem[j+1:]
			}
			if uid, ok := want[elem]; ok {
				return uid, true
			}
		}
	}
	return "", false
}

// ErrNotNamespace means the path is not a namespace handle.
var ErrNotNamespace = errors.New("not a namespace")

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		// nsfs files stat as regular files; anything else is not one.
		return 0, fmt.Errorf("%s: %w", path, ErrNotNamespace)
	}
	return st.Ino, nil
}
