package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Host directories: paths a node must find at their usual place on this
// machine (a fleet node binds its own directories at /etc/cni/net.d and
// /opt/cni/bin; the e2e binds a platform's at /etc/cni/multus/net.d).
// A fresh machine has none of them, so the tests make them, and several
// runs need them at once: `make test` runs the fleet beside the single-
// node e2e, both under /etc/cni. So a directory is made by whichever run
// needs it first, recorded as the tests', and removed by the release that
// leaves no live run needing it; a directory the machine had is never
// removed, and one that came to hold anything else is left for good.
// A killed run's claims are swept by the next claim or release.

// hostDirRegistry records the claims and the directories the tests made,
// under one lock (flock, so concurrent processes and goroutines agree).
type hostDirRegistry struct{ dir string }

// machineHostDirs is this machine's registry.
var machineHostDirs = hostDirRegistry{dir: "/run/istio-cni-test-hostdirs"}

// hostDirClaim is one run's claim on its paths; its file is its entry.
type hostDirClaim struct {
	PID   int      `json:"pid"`
	Start uint64   `json:"start"`
	Paths []string `json:"paths"`
}

// HostDirs is a claim ClaimHostDirs made; Release lets it go once.
type HostDirs struct {
	reg  hostDirRegistry
	file string
	once sync.Once
	err  error
}

// ClaimHostDirs makes the absolute paths (and their missing parents) exist
// until Release.
func ClaimHostDirs(paths ...string) (*HostDirs, error) { return machineHostDirs.claim(paths) }

var claimSeq atomic.Int64

func (r hostDirRegistry) claim(paths []string) (_ *HostDirs, err error) {
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("host directory %q: want a clean absolute path below /", p)
		}
	}
	start, err := startTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	h := &HostDirs{reg: r, file: filepath.Join(r.dir, fmt.Sprintf("claim-%d-%d.json", os.Getpid(), claimSeq.Add(1)))}
	err = r.locked(func(made map[string]bool) error {
		// The entry first: from here a sweep counts these paths as needed,
		// and a release of this claim removes what it made.
		data, err := json.Marshal(hostDirClaim{PID: os.Getpid(), Start: start, Paths: paths})
		if err != nil {
			return err
		}
		if err := os.WriteFile(h.file, data, 0o600); err != nil {
			return err
		}
		for _, p := range paths {
			if err := mkdirRecorded(p, made); err != nil {
				return fmt.Errorf("host directory %s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, h.Release())
	}
	return h, nil
}

// mkdirRecorded makes p and its missing parents, recording each it made.
func mkdirRecorded(p string, made map[string]bool) error {
	var missing []string
	for d := p; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for _, d := range slices.Backward(missing) {
		switch err := os.Mkdir(d, 0o755); {
		case err == nil:
			made[d] = true
		case !errors.Is(err, os.ErrExist): // another made it meanwhile: not ours
			return err
		}
	}
	// A file, or a link to nothing, at the path is no place to mount on.
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return fmt.Errorf("not a directory (%v)", err)
	}
	return nil
}

// Release drops the claim and removes the directories the tests made that
// no live claim needs any more. Safe to call more than once, and from an
// abort beside the claim's own cleanup.
func (h *HostDirs) Release() error {
	if h == nil {
		return nil
	}
	h.once.Do(func() {
		h.err = h.reg.locked(func(map[string]bool) error {
			if err := os.Remove(h.file); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		})
	})
	return h.err
}

// locked runs fn under the registry's lock with the set of directories
// the tests made, then sweeps: drops dead runs' claims and removes each
// made directory no live claim needs, deepest first, and saves the set.
func (r hostDirRegistry) locked(fn func(made map[string]bool) error) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(r.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	// Closing releases the flock.
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil { // #nosec G115 -- a descriptor
		return err
	}
	made := map[string]bool{}
	madeFile := filepath.Join(r.dir, "made.json")
	switch data, err := os.ReadFile(madeFile); { // #nosec G304 -- the registry's own file
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		var list []string
		if err := json.Unmarshal(data, &list); err != nil {
			return fmt.Errorf("%s: %w (the directories the tests made are no longer known: remove them and the file by hand)", madeFile, err)
		}
		for _, d := range list {
			made[d] = true
		}
	}
	fnErr := fn(made)
	sweepErr := r.sweep(made)
	list := slices.Sorted(func(yield func(string) bool) {
		for d := range made {
			if !yield(d) {
				return
			}
		}
	})
	return errors.Join(fnErr, sweepErr, writeRenamed(madeFile, list))
}

// writeRenamed writes v as JSON by rename: a run killed mid-write leaves
// the old list, never half of one.
func writeRenamed(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// onlyMade reports whether every entry of dir is a directory the tests made.
func onlyMade(dir string, made map[string]bool) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !made[filepath.Join(dir, e.Name())] {
			return false
		}
	}
	return true
}

// SweepHostDirs removes what killed runs' claims left: before a test
// decides a path is the machine's own because it exists.
func SweepHostDirs() error { return machineHostDirs.locked(func(map[string]bool) error { return nil }) }

// sweep removes dead claims' entries, then every made directory that no
// live claim's path is or lies under. One holding anything but the tests'
// directories is disowned and left.
func (r hostDirRegistry) sweep(made map[string]bool) error {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	var needed []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "claim-") {
			continue
		}
		file := filepath.Join(r.dir, e.Name())
		var c hostDirClaim
		data, err := os.ReadFile(file) // #nosec G304 -- the registry's own file
		if err == nil && json.Unmarshal(data, &c) == nil {
			if start, err := startTime(c.PID); err == nil && start == c.Start {
				needed = append(needed, c.Paths...)
				continue
			}
		}
		_ = os.Remove(file)
	}
	order := slices.SortedFunc(func(yield func(string) bool) {
		for d := range made {
			if !yield(d) {
				return
			}
		}
	}, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, d := range order {
		if slices.ContainsFunc(needed, func(p string) bool { return p == d || strings.HasPrefix(p, d+"/") }) {
			continue
		}
		switch err := os.Remove(d); {
		case err == nil, errors.Is(err, os.ErrNotExist):
			delete(made, d)
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
			// Holding only the tests' own directories, it waits for them;
			// holding anything else (a test's network namespaces in
			// /run/netns), it is disowned: removing it the moment it is
			// empty again could pull it from under whoever uses it.
			if !onlyMade(d, made) {
				delete(made, d)
			}
		case errors.Is(err, syscall.EBUSY): // a mount on it: a later sweep
		default:
			errs = append(errs, fmt.Errorf("removing host directory %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
