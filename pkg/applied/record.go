// Package applied keeps, for each sandbox of a pod, a record of what ADD
// did there: the rules it programmed (the typed spec and the address
// families), or that it passed the sandbox through. Either way the record
// ties the sandbox's network namespace to its pod: the audit programs a
// namespace only for the pod ADD recorded it for. The node audit repairs a pod to exactly that, not to what its
// annotations say now: Istio reads traffic annotations only when the pod
// starts, and admission policies that guard them usually check only
// CREATE, so an edit to a running pod must never weaken its rules through
// a repair. A pod whose annotations no longer match its record is reported
// instead.
//
// Records live in the run directory (/var/run/istio-cni/sandboxes, a
// tmpfs on most nodes: a reboot, which ends every sandbox, empties it), one
// file per sandbox: <pod UID>/<container ID>.json. DEL removes it; the
// agent prunes records of pods no longer on the node.
package applied

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// Version is the records' format. Two builds share the records while one
// replaces the other (an upgrade, a rollback), so each reads every version
// up to its own, an older record as that version wrote it, and a newer
// record only for its header (version, podUID, pod, container,
// netnsInode, passed: fields whose meaning no version changes), acting on nothing
// else in it: a field it does not know may be a rule it would strip. The
// audit leaves such a sandbox alone and says so. Any change to what a
// record holds takes a new version: format_test.go ties each version to
// its fields.
//
// A record says its version as the oldest that holds it: 2 only for a
// sandbox with native nftables rules, so an agent of a build before
// native nftables leaves those alone (it would check them for iptables
// rules and "repair" them), and audits the rest as before; 3 only for
// one whose IPv6 rules went to another iptables backend than its IPv4
// ones (BackendIPv6), which builds before it would read and repair in
// IPv4's.
const Version = 3

// Record is what ADD programmed in one sandbox.
type Record struct {
	Version   int    `json:"version"`
	PodUID    string `json:"podUID"`
	Pod       string `json:"pod"`       // namespace/name, for people
	Container string `json:"container"` // the sandbox's container ID
	// NetnsInode identifies the sandbox's network namespace: the audit
	// finds a pod's namespace by its addresses and matches it here.
	NetnsInode uint64 `json:"netnsInode"`
	// Passed: ADD left this sandbox without rules (the pod is not meshed);
	// Spec and the families are empty then.
	Passed bool          `json:"passed,omitempty"`
	Spec   iptables.Spec `json:"spec"`
	IPv4   bool          `json:"ipv4"`
	IPv6   bool          `json:"ipv6"`
	// Backend is the iptables implementation ADD used (legacy or nft, as
	// its auto resolved on the node): the agent reads and repairs with it.
	Backend release.Backend `json:"backend,omitempty"`
	// BackendIPv6 is the IPv6 rules' when it is not Backend: on Debian
	// and Ubuntu, iptables and ip6tables are separate alternatives, and
	// ADD writes each family where the node's own program for it leads.
	// Version 3.
	BackendIPv6 release.Backend `json:"backendIPv6,omitempty"`
	// Native: the rules are native nftables (pkg/iptables/nftables), not
	// iptables; Backend is empty then. Version 2.
	Native bool      `json:"native,omitempty"`
	At     time.Time `json:"at"`
}

// Newer reports that a later build wrote the record: only its header was
// read, and what it applied is unknown here.
func (r Record) Newer() bool { return r.Version > Version }

// Model is the rule model the record stands for: none for a sandbox ADD
// passed through. ok is false for a Newer record: what its sandbox holds
// is unknown here, which is not "no rules".
func (r Record) Model() (m iptables.Model, ok bool) {
	switch {
	case r.Newer():
		return iptables.Model{}, false
	case r.Passed:
		return iptables.Model{}, true
	}
	return iptables.Build(r.Spec, r.IPv4, r.IPv6), true
}

// Has reports whether ADD left a record for this sandbox (a repeated ADD).
func (s Store) Has(podUID, container string) bool {
	if !validID(podUID) || !validID(container) {
		return false
	}
	_, err := os.Lstat(filepath.Join(s.Dir, podUID, container+".json"))
	return err == nil
}

// maxRecord bounds a record file read: a spec is a few kilobytes at most.
const maxRecord = 256 << 10

// Store is a records directory.
type Store struct {
	Dir string
	// Cache, when set, keeps what was decoded (cache.go): the node agent
	// reads every record for each pod it checks.
	Cache *Cache
}

// validID: a pod UID or container ID as a single, plain path element.
func validID(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "/\\\x00") && s != "." && s != ".."
}

// Write stores r atomically (a temp file renamed into place) under the
// store's directory: Stage, then Commit.
func (s Store) Write(r Record) error {
	st, err := s.Stage(r)
	if err != nil {
		return err
	}
	return st.Commit()
}

// Staged is a record written under a temp name in its pod's directory,
// not yet in place: Commit puts it there, Discard removes it. ADD stages
// its record while the pod's rules are written, and commits it once they
// are.
type Staged struct {
	pod            int // the pod's directory, open
	tmp, name, dir string
	made           bool // Stage made the pod's directory
}

// staged numbers this process's temp names: two stages of one sandbox (the
// agent's ADD and the plugin's, when the shim stopped waiting) never share
// one, so neither's Discard removes the other's file nor do their writes
// interleave.
var staged atomic.Uint64

// Stage writes r under a temp name of its own. It never makes the store's
// directory: the installer does, and the uninstall removes it, so an ADD
// that outlives the uninstall cannot leave records behind. It does not
// follow symlinks inside the directory: each name is one component,
// opened relative to its parent without following one, which is what
// os.Root would guarantee here in about half the system calls (the record
// is on every ADD's path).
func (s Store) Stage(r Record) (*Staged, error) {
	if !validID(r.PodUID) || !validID(r.Container) {
		return nil, fmt.Errorf("record for %s: pod UID %q or container ID %q is not a plain name", r.Pod, r.PodUID, r.Container)
	}
	switch {
	case r.BackendIPv6 != "":
		r.Version = 3
	case r.Native:
		r.Version = 2
	default:
		r.Version = 1
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	st := &Staged{pod: -1, name: r.Container + ".json", dir: filepath.Join(s.Dir, r.PodUID),
		tmp: fmt.Sprintf(".%s.%d.%d.tmp", r.Container, os.Getpid(), staged.Add(1))}
	dir, err := unix.Open(s.Dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st.fail("open", s.Dir, err)
	}
	defer func() { _ = unix.Close(dir) }()
	// Again if the directory went: another sandbox's Discard, or a DEL,
	// of the same pod removes it once empty, which it may be between its
	// making and this temp file's.
	var f int
	for try := 0; ; try++ {
		err := unix.Mkdirat(dir, r.PodUID, 0o700)
		if err != nil && err != unix.EEXIST {
			return nil, st.fail("mkdir", st.dir, err)
		}
		st.made = err == nil
		if st.pod, err = unix.Openat(dir, r.PodUID, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			if err == unix.ENOENT && try < 2 {
				continue
			}
			return nil, st.fail("open", st.dir, err)
		}
		// O_EXCL: nor a FIFO or anything else planted at the name.
		if f, err = unix.Openat(st.pod, st.tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600); err == nil {
			break
		}
		st.close()
		if err != unix.ENOENT || try >= 2 {
			return nil, st.fail("open", filepath.Join(st.dir, st.tmp), err)
		}
	}
	n, werr := unix.Write(f, data)
	if werr == nil && n < len(data) {
		werr = io.ErrShortWrite
	}
	if err := errors.Join(werr, unix.Close(f)); err != nil {
		st.Discard()
		return nil, st.fail("write", filepath.Join(st.dir, st.tmp), err)
	}
	return st, nil
}

func (st *Staged) fail(op, path string, err error) error {
	return fmt.Errorf("records: %w", &fs.PathError{Op: op, Path: path, Err: err})
}

// Commit renames the staged record into place, replacing the sandbox's
// earlier record; a failed rename discards it.
func (st *Staged) Commit() error {
	err := unix.Renameat(st.pod, st.tmp, st.pod, st.name)
	if err != nil {
		st.Discard()
		return st.fail("rename", filepath.Join(st.dir, st.name), err)
	}
	_ = unix.Close(st.pod)
	return nil
}

// Discard removes the staged record; the sandbox's earlier record, if
// any, stays.
func (st *Staged) Discard() {
	_ = unix.Unlinkat(st.pod, st.tmp, 0)
	st.close()
}

// close closes the pod's directory, and removes it when Stage made it and
// it is empty again: a pod new to the store leaves nothing.
func (st *Staged) close() {
	_ = unix.Close(st.pod)
	if st.made {
		_ = unix.Rmdir(st.dir) // only succeeds once empty
	}
}

// Remove deletes a sandbox's record, and its pod's directory once empty.
// An empty podUID looks for the container under every pod. A record that
// is not there is no error.
func (s Store) Remove(podUID, container string) error {
	if !validID(container) || (podUID != "" && !validID(podUID)) {
		return nil
	}
	root, err := os.OpenRoot(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	defer func() { _ = root.Close() }()
	uids := []string{podUID}
	if podUID == "" {
		if uids, err = s.podUIDs(); err != nil {
			return err
		}
	}
	for _, uid := range uids {
		if err := root.Remove(filepath.Join(uid, container+".json")); err == nil || !errors.Is(err, fs.ErrNotExist) {
			_ = root.Remove(uid) // only succeeds once empty
			return err
		}
	}
	return nil
}

// ForPod returns the records of a pod's sandboxes (usually one), Newer
// ones with their header only. A record that cannot be read is skipped. Records from a
// Cache are shared: callers read them, never change them.
func (s Store) ForPod(podUID string) ([]Record, error) {
	if !validID(podUID) {
		return nil, nil
	}
	root, err := os.OpenRoot(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	defer func() { _ = root.Close() }()
	return s.forPod(root, podUID)
}

func (s Store) forPod(root *os.Root, podUID string) ([]Record, error) {
	dir, err := root.Open(podUID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	defer func() { _ = dir.Close() }()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	s.Cache.keepNames(podUID, names)
	var out []Record
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") {
			continue
		}
		if r, ok := s.Cache.read(root, dir, podUID, n); ok && r.PodUID == podUID {
			out = append(out, r)
		}
	}
	return out, nil
}

// readRecord reads one record, never through a symlink planted at its
// name, and no more of it than any record the plugin writes; id is the
// file it read.
// ioErr says the file could not be read (then ok is false): unlike a
// record that does not decode, that says nothing of its content.
func readRecord(root *os.Root, name string) (r Record, id fileID, ok bool, ioErr error) {
	// Nor a FIFO planted at it, which would hold the audit in open.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Record{}, id, false, err
	}
	defer func() { _ = f.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Record{}, id, false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Record{}, id, false, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return Record{}, id, false, err
	}
	r, ok = decode(data)
	return r, statID(&st), ok, nil
}

// Owners returns every record of the namespace with inode ino, of any pod:
// a namespace recorded for another pod is never programmed for this one.
func (s Store) Owners(ino uint64) ([]Record, error) {
	uids, err := s.podUIDs()
	if err != nil {
		return nil, err
	}
	// Every pod's records are read: what the cache holds beyond is gone.
	present := make(map[string]bool, len(uids))
	for _, uid := range uids {
		present[uid] = true
	}
	s.Cache.keepPods(func(uid string) bool { return present[uid] })
	if len(uids) == 0 {
		return nil, nil
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	defer func() { _ = root.Close() }()
	var out []Record
	for _, uid := range uids {
		recs, err := s.forPod(root, uid)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.NetnsInode == ino && ino != 0 {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// Prune removes the records of pods that are not live (the agent's view of
// its node), so a sandbox torn down without DEL leaves nothing for long.
func (s Store) Prune(live func(podUID string) bool) error {
	uids, err := s.podUIDs()
	if err != nil {
		return err
	}
	var errs []error
	for _, uid := range uids {
		if !live(uid) {
			errs = append(errs, os.RemoveAll(filepath.Join(s.Dir, uid)))
		}
	}
	s.Cache.keepPods(live)
	return errors.Join(errs...)
}

func (s Store) podUIDs() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	var uids []string
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) {
			uids = append(uids, e.Name())
		}
	}
	return uids, nil
}
