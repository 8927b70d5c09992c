package cluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// cgroupMounts is where this machine mounts its cgroup hierarchies (v1,
// one per controller, plus the named systemd and the unified ones).
const cgroupMounts = "/sys/fs/cgroup"

// Each node's pods live under a cgroup root of its own. Two kubelets on
// one machine (the demo's and a test run's) must not share the default
// /kubepods: each removes pod cgroups it does not know, killing the other's
// containers.
func cgroupRootName(bridge string) string { return "istio-cni-" + bridge }

// createCgroupRoot makes /<name> in every hierarchy, as kubelet requires
// its cgroupRoot to exist. A new cpuset cgroup starts with no CPUs or
// memory nodes, so it gets its parent's.
func createCgroupRoot(name string) error {
	hierarchies, err := os.ReadDir(cgroupMounts)
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(cgroupMounts, h.Name(), name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if h.Name() != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(cgroupMounts, "cpuset", f)) // #nosec G304 -- cgroupfs
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

// removeCgroupRoot removes /<name> and the cgroups kubelet made below it,
// deepest first; it fails (EBUSY) only if a process is still inside.
func removeCgroupRoot(name string) error {
	hierarchies, err := os.ReadDir(cgroupMounts)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(cgroupMounts, h.Name(), name), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, &fs.PathError{Op: "rmdir", Path: d, Err: err})
			}
		}
	}
	return errors.Join(errs...)
}
