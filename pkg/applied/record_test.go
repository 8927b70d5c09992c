package applied

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
)

func sample(uid, container string) Record {
	spec := iptables.DefaultSpec()
	spec.ExcludeInterfaces = []iptables.IfName{"eth9"}
	return Record{PodUID: uid, Pod: "default/web", Container: container, NetnsInode: 42, Spec: spec, IPv4: true,
		At: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
}

func TestWriteReadRemovePrune(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	a, b := sample("uid-a", "c1"), sample("uid-b", "c2")
	for _, r := range []Record{a, b} {
		if err := s.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ForPod("uid-a")
	if err != nil || len(got) != 1 || !SameSpec(got[0].Spec, a.Spec) || got[0].NetnsInode != 42 || got[0].Version != 1 {
		t.Fatalf("ForPod: %+v, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(s.Dir, "uid-a", "c1.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file: %v %v", fi, err)
	}
	// DEL without the pod's UID finds the container anyway.
	if err := s.Remove("", "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "uid-a")); !os.IsNotExist(err) {
		t.Errorf("the pod's empty directory stays: %v", err)
	}
	if err := s.Prune(func(uid string) bool { return uid != "uid-b" }); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(s.Dir); len(left) != 0 {
		t.Errorf("left after prune: %v", left)
	}
	if err := s.Remove("uid-x", "none"); err != nil {
		t.Errorf("removing what is not there: %v", err)
	}
}

func TestUnreadableRecordsAreSkipped(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := s.Write(sample("uid", "good")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir, "uid")
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"version":1,"podUID":"uid"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"old.json":  `{"version":0,"podUID":"uid"}`,
		"huge.json": `{"version":1,"podUID":"uid","pod":"` + strings.Repeat("x", maxRecord) + `"}`,
		"bad.json":  `{`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	got, err := s.ForPod("uid")
	if err != nil || len(got) != 1 || got[0].Container != "good" {
		t.Errorf("ForPod: %d records, %v; want only the good one", len(got), err)
	}
	if err := s.Write(Record{PodUID: "../escape", Container: "c"}); err == nil {
		t.Error("a pod UID that is a path was accepted")
	}
}

func TestSpecDiff(t *testing.T) {
	was := iptables.DefaultSpec()
	now := was
	if !SameSpec(was, now) {
		t.Fatal("same spec differs")
	}
	now.OutboundExclude = append([]uint16{}, 15020, 9000)
	if d := SpecDiff(was, now); !strings.Contains(d, "OutboundExclude [15020] -> [15020,9000]") {
		t.Errorf("diff %q", d)
	}
	was.RerouteInterfaces, now.RerouteInterfaces = nil, []iptables.IfName{}
	now.OutboundExclude = was.OutboundExclude
	if !SameSpec(was, now) {
		t.Error("nil and empty lists differ")
	}
}

// A record of a build that excluded the status port outbound whatever
// excludeOutboundPorts said holds the settings it was given; any other
// difference, and a record without the port where it is now excluded, is
// a change.
func TestSameSettings(t *testing.T) {
	spec := func(exclude ...uint16) iptables.Spec {
		s := iptables.DefaultSpec()
		s.OutboundExclude = exclude
		return s
	}
	for _, tc := range []struct {
		name          string
		recorded, now iptables.Spec
		same          bool
	}{
		{"same", spec(5432), spec(5432), true},
		{"the older builds' status port", spec(5432, 15020), spec(5432), true},
		{"the older builds' status port, an empty annotation", spec(15020), spec(), true},
		{"listed by the pod", spec(15020, 5432), spec(15020, 5432), true},
		{"a port edited in", spec(5432, 15020), spec(5432, 9092), false},
		{"the status port dropped since", spec(5432), spec(15020), false},
		{"another field", spec(5432, 15020), func() iptables.Spec { s := spec(5432); s.DNSCapture = true; return s }(), false},
	} {
		if got := SameSettings(tc.recorded, tc.now); got != tc.same {
			t.Errorf("%s: SameSettings(%v, %v) = %v, want %v", tc.name, tc.recorded.OutboundExclude, tc.now.OutboundExclude, got, tc.same)
		}
	}
}

// The store's directory is the installer's to make: Write into a missing
// one fails and creates nothing (a late ADD after the uninstall).
func TestWriteNeverMakesTheDirectory(t *testing.T) {
	parent := t.TempDir()
	s := Store{Dir: filepath.Join(parent, "sandboxes")}
	if err := s.Write(sample("uid", "c1")); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("Write made %v", left)
	}
}

// Write follows no symlink planted in the store (at the pod's directory
// or the record's name) and is not held by a FIFO or a symlink where a
// temp file was once: it fails, or replaces the link, and writes nothing
// outside.
func TestWriteFollowsNothingPlanted(t *testing.T) {
	for name, plant := range map[string]func(dir, outside string) error{
		"a symlink for the pod's directory": func(dir, outside string) error { return os.Symlink(outside, filepath.Join(dir, "uid")) },
		"a symlink at a temp name": func(dir, outside string) error {
			return errors.Join(os.Mkdir(filepath.Join(dir, "uid"), 0o700), os.Symlink(filepath.Join(outside, "f"), filepath.Join(dir, "uid", ".c1.tmp")))
		},
		"a FIFO at a temp name": func(dir, _ string) error {
			return errors.Join(os.Mkdir(filepath.Join(dir, "uid"), 0o700), syscall.Mkfifo(filepath.Join(dir, "uid", ".c1.tmp"), 0o600))
		},
		"a symlink at the record's name": func(dir, outside string) error {
			return errors.Join(os.Mkdir(filepath.Join(dir, "uid"), 0o700), os.Symlink(filepath.Join(outside, "f"), filepath.Join(dir, "uid", "c1.json")))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, outside := Store{Dir: t.TempDir()}, t.TempDir()
			if err := plant(s.Dir, outside); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- s.Write(sample("uid", "c1")) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Write is held by what was planted")
			}
			if left, _ := os.ReadDir(outside); len(left) != 0 {
				t.Errorf("Write wrote outside the store: %v", left)
			}
			if err == nil {
				if got, rerr := s.ForPod("uid"); rerr != nil || len(got) != 1 {
					t.Errorf("Write succeeded, but the record reads %+v, %v", got, rerr)
				}
			}
		})
	}
}

// Two stages of one sandbox (the agent's ADD and the plugin's, when the
// shim stopped waiting) have temp files of their own: one's Discard
// leaves the other's to commit, and their writes never mix.
func TestStagesOfOneSandboxKeepApart(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	plugin, err := s.Stage(sample("uid", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := s.Stage(sample("uid", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	agent.Discard()
	if err := plugin.Commit(); err != nil {
		t.Fatalf("the plugin's commit after the agent's discard: %v", err)
	}
	long := sample("uid", "c1")
	long.Pod = "default/" + strings.Repeat("a-long-name-", 20)
	for i := range 300 {
		var wg sync.WaitGroup
		for _, r := range []Record{long, sample("uid", "c1")} {
			wg.Go(func() {
				if err := s.Write(r); err != nil {
					t.Errorf("round %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if got, _ := s.ForPod("uid"); len(got) != 1 {
			t.Fatalf("round %d: %d readable records, want 1", i, len(got))
		}
	}
}

// Another sandbox of the pod discarding its stage (or a DEL) removes the
// pod's directory once empty; a stage between its making and its temp
// file makes it again rather than fail.
func TestStageOutlivesAnotherSandboxsDiscard(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	for i := range 300 {
		other, err := s.Stage(sample("uid", "cB"))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := s.Write(sample("uid", "cA")); err != nil {
				t.Errorf("round %d: %v", i, err)
			}
		})
		wg.Go(other.Discard)
		wg.Wait()
		if err := s.Remove("uid", "cA"); err != nil {
			t.Fatal(err)
		}
	}
}

// A staged record is no record until committed; discarded, it leaves
// the sandbox's earlier record as it was, and no directory for a pod new
// to the store.
func TestStageCommitDiscard(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	st, err := s.Stage(sample("new", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ForPod("new"); len(got) != 0 {
		t.Errorf("a staged record reads as %+v", got)
	}
	st.Discard()
	if left, _ := os.ReadDir(s.Dir); len(left) != 0 {
		t.Errorf("a discarded record left %v", left)
	}
	if err := s.Write(sample("uid", "c1")); err != nil {
		t.Fatal(err)
	}
	again := sample("uid", "c1")
	again.NetnsInode = 43
	if st, err = s.Stage(again); err != nil {
		t.Fatal(err)
	}
	st.Discard()
	if got, _ := s.ForPod("uid"); len(got) != 1 || got[0].NetnsInode != 42 {
		t.Errorf("after a discard: %+v, want the earlier record", got)
	}
	if st, err = s.Stage(again); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ForPod("uid"); len(got) != 1 || got[0].NetnsInode != 43 {
		t.Errorf("after a commit: %+v, want the new record", got)
	}
	if names, _ := os.ReadDir(filepath.Join(s.Dir, "uid")); len(names) != 1 {
		t.Errorf("the pod's directory holds %v, want only the record", names)
	}
}

// BenchmarkWrite is the record each ADD writes, for a pod new to the
// store (run with TMPDIR on a tmpfs, as /var/run is on a node).
func BenchmarkWrite(b *testing.B) {
	s := Store{Dir: b.TempDir()}
	r := sample("", "c1")
	for i := 0; b.Loop(); i++ {
		r.PodUID = fmt.Sprint("uid-", i)
		if err := s.Write(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOwners is the audit's question for each pod it checks, on a
// full node (110 sandboxes): which records name this namespace.
func BenchmarkOwners(b *testing.B) {
	s := Store{Dir: b.TempDir()}
	for i := range 110 {
		r := sample(fmt.Sprint("uid-", i), fmt.Sprint("c", i))
		r.NetnsInode = uint64(1000 + i)
		if err := s.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	for _, cache := range []*Cache{nil, NewCache()} {
		name := "uncached"
		if cache != nil {
			name = "cached"
			cache.now = func() time.Time { return time.Now().Add(time.Hour) }
		}
		s.Cache = cache
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if owners, err := s.Owners(1042); err != nil || len(owners) != 1 {
					b.Fatal(owners, err)
				}
			}
		})
	}
}
