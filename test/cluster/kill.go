package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procEntry is one process in /proc, as far as killContainers needs it.
type procEntry struct {
	pid, ppid int
	start     uint64 // tells it apart from a later process with its PID
	args      []string
}

// processes reads the process table; processes that end meanwhile are
// left out.
func processes() ([]procEntry, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []procEntry
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")) // #nosec G304 -- procfs
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold spaces and ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		start, err2 := strconv.ParseUint(f[19], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")) // #nosec G304 -- procfs
		out = append(out, procEntry{pid: pid, ppid: ppid, start: start, args: strings.Split(string(cmdline), "\x00")})
	}
	return out, nil
}

// nodeContainerProcs lists the shims of the containerd at socket, every
// process below them (runc leaves each container to its shim, a
// subreaper), and every process in the node's cgroups (which catches one
// a dead shim left to init).
func nodeContainerProcs(socket, cgroupRoot string) ([]procEntry, error) {
	all, err := processes()
	if err != nil {
		return nil, err
	}
	byPID := map[int]procEntry{}
	children := map[int][]procEntry{}
	var out []procEntry
	for _, p := range all {
		byPID[p.pid] = p
		children[p.ppid] = append(children[p.ppid], p)
		if isShimOf(p.args, socket) {
			out = append(out, p)
		}
	}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i].pid]...)
	}
	seen := map[int]bool{}
	for _, p := range out {
		seen[p.pid] = true
	}
	dirs, err := cgroupDirs(cgroupRoot)
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")) // #nosec G304 -- cgroupfs
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if p, ok := byPID[pid]; ok && !seen[pid] && pid > 1 {
				seen[pid] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// killContainers SIGKILLs every process of the node's containers, with no
// warning, as a power cut ends them, and returns once all are gone. It
// rescans until none is left, so a process forked meanwhile dies too.
func killContainers(socket, cgroupRoot string) error {
	return killUntilGone("container processes", func() ([]procEntry, error) {
		return nodeContainerProcs(socket, cgroupRoot)
	})
}

// killInNetNS SIGKILLs every process whose network namespace is one of
// netns (the pods' bind mounts) and returns once all are gone, as a power
// cut ends them: a CNI plugin, or the iptables-restore it runs, that
// containerd started in a pod's namespace belongs to no container and
// outlives containerd.
func killInNetNS(netns []string) error {
	inodes := map[uint64]bool{}
	for _, p := range netns {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil {
			inodes[st.Ino] = true
		}
	}
	return killUntilGone("processes in the pods' network namespaces", func() ([]procEntry, error) {
		all, err := processes()
		var procs []procEntry
		for _, p := range all {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join("/proc", strconv.Itoa(p.pid), "ns", "net"), &st) == nil && inodes[st.Ino] {
				procs = append(procs, p)
			}
		}
		return procs, err
	})
}

// killUntilGone SIGKILLs what list finds until it finds nothing, so that
// a process forked meanwhile dies too; what names them in the error.
func killUntilGone(what string, list func() ([]procEntry, error)) error {
	for range 5 {
		procs, err := list()
		if err != nil {
			return err
		}
		if len(procs) == 0 {
			return nil
		}
		if err := killAll(procs); err != nil {
			return err
		}
	}
	return errors.New(what + " keep appearing after SIGKILL")
}

// killAll SIGKILLs procs and waits, up to 10 s, until each is gone.
func killAll(procs []procEntry) error {
	for _, p := range procs {
		if err := p.kill(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		for p.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if p.alive() {
			return fmt.Errorf("%s (pid %d) still running 10s after SIGKILL", p.args[0], p.pid)
		}
	}
	return nil
}

// kill SIGKILLs p if its PID still names it. os.FindProcess holds a pidfd,
// so once the start time matches, the signal cannot hit a successor.
func (p procEntry) kill() error {
	proc, err := os.FindProcess(p.pid)
	if err != nil {
		return nil // gone
	}
	defer func() { _ = proc.Release() }()
	if !p.alive() {
		return nil
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s (pid %d): %w", p.args[0], p.pid, err)
	}
	return nil
}

func (p procEntry) alive() bool {
	start, err := startTime(p.pid)
	return err == nil && start == p.start
}
