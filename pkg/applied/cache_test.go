package applied

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	edited := editInPlace(t, path, fi, `"netnsInode":43`, `"netnsInode":44`)
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
	// Not yet settled (the clock stands at the records' writing): read
	// every time.
	s = Store{Dir: s.Dir, Cache: NewCache()}
	written := time.Now()
	if err := s.Write(sample("uid-a", "c")); err != nil {
		t.Fatal(err)
	}
	s.Cache.now = func() time.Time { return written }
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
	if len(s.Cache.m) != 1 || len(s.Cache.m["uid-b"]) != 1 {
		t.Errorf("the cache holds %v, want uid-b's record only", s.Cache.m)
	}
	// A pod's sandbox DEL removed, and pods Prune removed, are forgotten.
	if err := s.Write(sample("uid-b", "c2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForPod("uid-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("uid-b", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForPod("uid-b"); err != nil {
		t.Fatal(err)
	}
	if _, kept := s.Cache.m["uid-b"]["c.json"]; kept || len(s.Cache.m["uid-b"]) != 1 {
		t.Errorf("after a DEL the cache holds %v, want uid-b's c2 only", s.Cache.m)
	}
	if err := s.Prune(func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if len(s.Cache.m) != 0 {
		t.Errorf("after pruning every pod the cache holds %v", s.Cache.m)
	}
}

// A record read once it has settled, then changed in place keeping its
// size and modification time, is read again: its change time tells.
func TestCacheSeesASettledRecordChangedInPlace(t *testing.T) {
	s := Store{Dir: t.TempDir(), Cache: NewCache()}
	s.Cache.now = func() time.Time { return time.Now().Add(time.Hour) }
	if err := s.Write(sample("uid", "c")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ForPod("uid"); err != nil || len(got) != 1 || got[0].NetnsInode != 42 {
		t.Fatalf("ForPod: %+v, %v", got, err)
	}
	path := filepath.Join(s.Dir, "uid", "c.json")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// File times tick coarsely: the edit must fall in a later tick than
	// the write, as it does on a node a second later.
	changed := fi.Sys().(*syscall.Stat_t).Ctim
	for time.Since(time.Unix(changed.Sec, changed.Nsec)) < 50*time.Millisecond {
		time.Sleep(5 * time.Millisecond)
	}
	editInPlace(t, path, fi, `"netnsInode":42`, `"netnsInode":24`)
	if got, err := s.ForPod("uid"); err != nil || len(got) != 1 || got[0].NetnsInode != 24 {
		t.Errorf("after an edit in place: %+v, %v, want inode 24", got, err)
	}
}

// A FIFO planted at a record's name is no record, and holds nobody up.
func TestAFIFOIsNoRecord(t *testing.T) {
	for _, cache := range []*Cache{nil, NewCache()} {
		s := Store{Dir: t.TempDir(), Cache: cache}
		if err := s.Write(sample("uid", "c")); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(s.Dir, "uid", "fifo.json"), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan []Record, 1)
		go func() {
			recs, _ := s.ForPod("uid")
			done <- recs
		}()
		select {
		case recs := <-done:
			if len(recs) != 1 {
				t.Errorf("records %+v, want the one real record", recs)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("ForPod is still opening the FIFO")
		}
	}
}

// editInPlace replaces old with new in the file at path, keeping its inode
// and the modification time it had (fi): an edit only the size or the
// change time can tell. It returns the edited content.
func editInPlace(t *testing.T, path string, fi os.FileInfo, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), old, new, 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	return edited
}
