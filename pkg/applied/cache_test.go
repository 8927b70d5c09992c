package applied

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A cached store reads what is on disk now: a record written again (a new
// file renamed over it), one edited in place with its size and times kept
// where it can, one replaced by a symlink, and one removed.
func TestCacheReadsWhatIsOnDiskNow(t *testing.T) {
	s := Store{Dir: t.TempDir(), Cache: NewCache()}
	r := sample("uid", "c1")
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	inode := func() uint64 {
		t.Helper()
		got, err := s.ForPod("uid")
		if err != nil || len(got) != 1 {
			t.Fatalf("ForPod: %+v, %v", got, err)
		}
		return got[0].NetnsInode
	}
	if got := inode(); got != 42 {
		t.Fatalf("first read: inode %d, want 42", got)
	}
	r.NetnsInode = 43
	if err := s.Write(r); err != nil {
		t.Fatal(err)
	}
	if got := inode(); got != 43 {
		t.Errorf("after a rewrite: inode %d, want 43", got)
	}
	// Edited in place at once, same length, the modification time put
	// back: within the file system's tick nothing stat shows may differ,
	// which is why a record changed that recently is never kept.
	path := filepath.Join(s.Dir, "uid", "c1.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `"netnsInode":43`, `"netnsInode":44`, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if got := inode(); got != 44 {
		t.Errorf("after an edit in place: inode %d, want 44", got)
	}
	// A symlink planted at the name is not followed, cached or not.
	elsewhere := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(elsewhere, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Cache.now = func() time.Time { return time.Now().Add(time.Hour) } // everything settled
	_ = inode()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ForPod("uid"); err != nil || len(got) != 0 {
		t.Errorf("through a symlink: %+v, %v", got, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ForPod("uid"); err != nil || len(got) != 0 {
		t.Errorf("removed: %+v, %v", got, err)
	}
}

// A settled record is decoded once: the audit's Owners, asked for each pod
// it checks, then costs a stat a record.
func TestCacheDecodesASettledRecordOnce(t *testing.T) {
	s := Store{Dir: t.TempDir(), Cache: NewCache()}
	s.Cache.now = func() time.Time { return time.Now().Add(time.Hour) }
	for _, uid := range []string{"uid-a", "uid-b"} {
		if err := s.Write(sample(uid, "c")); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if owners, err := s.Owners(42); err != nil || len(owners) != 2 {
			t.Fatalf("Owners: %+v, %v", owners, err)
		}
	}
	if s.Cache.hits != 4 {
		t.Errorf("%d reads from the cache, want 4 (two records, read again twice)", s.Cache.hits)
	}
	// Not yet settled: read every time.
	s = Store{Dir: s.Dir, Cache: NewCache()}
	for range 3 {
		if _, err := s.Owners(42); err != nil {
			t.Fatal(err)
		}
	}
	if s.Cache.hits != 0 {
		t.Errorf("%d reads from the cache of records changed just now, want none", s.Cache.hits)
	}
}

// Owners, which reads every record, leaves the cache holding only the
// pods still in the store.
func TestCacheForgetsGonePods(t *testing.T) {
	s := Store{Dir: t.TempDir(), Cache: NewCache()}
	s.Cache.now = func() time.Time { return time.Now().Add(time.Hour) }
	for _, uid := range []string{"uid-a", "uid-b"} {
		if err := s.Write(sample(uid, "c")); err != nil {
			t.Fatal(err)
		}
	}
	if owners, err := s.Owners(42); err != nil || len(owners) != 2 {
		t.Fatalf("Owners: %+v, %v", owners, err)
	}
	if err := s.Remove("uid-a", "c"); err != nil {
		t.Fatal(err)
	}
	if owners, err := s.Owners(42); err != nil || len(owners) != 1 {
		t.Fatalf("Owners after a DEL: %+v, %v", owners, err)
	}
	if len(s.Cache.m) != 1 {
		t.Errorf("the cache holds %d records, want 1: %v", len(s.Cache.m), s.Cache.m)
	}
}
