package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts is where this machine mounts its cgroup hierarchies (v1,
// one per controller, plus the named systemd and the unified ones).
const cgroupMounts = "/sys/fs/cgroup"

// Each node's pods live under a cgroup root of its own. Two kubelets on
// one machine (the demo's and a test run's) must not share the default
// /kubepods: each removes pod cgroups it does not know, killing the other's
// containers.
func cgroupRootName(bridge string) string { return "istio-cni-" + bridge }

// hierarchies lists the mounted cgroup hierarchies: the one unified mount
// on a cgroup v2 host; one per controller (and the named ones) on v1.
func hierarchies() ([]string, error) {
	if _, err := os.Stat(filepath.Join(cgroupMounts, "cgroup.controllers")); err == nil {
		return []string{cgroupMounts}, nil
	}
	entries, err := os.ReadDir(cgroupMounts)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupMounts, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out, nil
}

// createCgroupRoot makes /<name> in every hierarchy, as kubelet requires
// its cgroupRoot to exist. On v2 it delegates every controller to it; on
// v1 a new cpuset cgroup starts with no CPUs or memory nodes, so it gets
// its parent's.
func createCgroupRoot(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if h == cgroupMounts { // v2
			if err := delegate(dir); err != nil {
				return err
			}
			continue
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f)) // #nosec G304 -- cgroupfs
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil { // #nosec G306 -- cgroupfs
				return err
			}
		}
	}
	return nil
}

// delegate enables, for the children of a v2 cgroup, every controller it
// has.
func delegate(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers")) // #nosec G304 -- cgroupfs
	if err != nil {
		return err
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		enable = append(enable, "+"+c)
	}
	if len(enable) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644) // #nosec G306 -- cgroupfs
}

// cgroupDirs lists /<name> and every cgroup below it, parents first.
func cgroupDirs(name string) ([]string, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	return dirs, nil
}

// killCgroupProcs SIGKILLs every process left in the node's cgroups: only
// this node's containers live there (a failed CRI cleanup leaves them
// behind), so they are ours.
func killCgroupProcs(name string) error {
	dirs, err := cgroupDirs(name)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")) // #nosec G304 -- cgroupfs
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return nil
}

// removeCgroupRoot removes /<name> and the cgroups kubelet made below it,
// deepest first, after killing what is left inside (a killed process
// leaves its cgroup shortly after the signal).
func removeCgroupRoot(name string) error {
	if err := killCgroupProcs(name); err != nil {
		return err
	}
	var errs []error
	for range 50 {
		dirs, err := cgroupDirs(name)
		if err != nil {
			return err
		}
		errs = nil
		for _, d := range slices.Backward(dirs) {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, &fs.PathError{Op: "rmdir", Path: d, Err: err})
			}
		}
		if len(errs) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(errs...)
}
