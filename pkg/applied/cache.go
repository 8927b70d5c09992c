package applied

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Cache keeps decoded records by the identity of the file each came from
// (device, inode, size, modification and change times): a record is
// rewritten only by renaming a new file over it, so a file that stat says
// is the same was read before. The audit asks, for every pod it checks,
// which records name that pod's namespace (Owners): without the cache
// that is every record of the node decoded again, 2.5 ms a pod on a full
// node. Safe for concurrent use; a nil Cache reads every time.
type Cache struct {
	mu   sync.Mutex
	m    map[string]cached // by name under the store's directory
	hits int               // for tests
	now  func() time.Time
}

// settle is how old a file's change must be for it to be kept: file
// times tick coarsely (a jiffy), so a file changed in place within the
// tick it was read in could look the same after; one read that soon is
// read again next time instead.
const settle = time.Second

type cached struct {
	id fileID
	r  Record
	ok bool
}

// fileID is what identifies one version of a record file.
type fileID struct {
	dev, ino, size      uint64
	mtimeSec, mtimeNsec int64
	ctimeSec, ctimeNsec int64
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[string]cached{}, now: time.Now} }

func statID(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), // #nosec G115 -- a file's size
		mtimeSec: st.Mtim.Sec, mtimeNsec: st.Mtim.Nsec, ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}
}

// read is readRecord of the file file in dir, the directory podUID of
// root: from the cache when it is the file read before.
func (c *Cache) read(root *os.Root, dir *os.File, podUID, file string) (Record, bool) {
	name := filepath.Join(podUID, file)
	if c == nil {
		r, _, ok := readRecord(root, name)
		return r, ok
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), file, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		c.mu.Lock()
		hit, found := c.m[name]
		c.mu.Unlock()
		if found && hit.id == statID(&st) {
			c.mu.Lock()
			c.hits++
			c.mu.Unlock()
			return hit.r, hit.ok
		}
	}
	r, id, ok := readRecord(root, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if id != (fileID{}) && c.now().Sub(time.Unix(id.ctimeSec, id.ctimeNsec)) >= settle {
		c.m[name] = cached{id: id, r: r, ok: ok}
	} else {
		delete(c.m, name)
	}
	return r, ok
}

// keepOnly forgets the records of pods not in uids (the store's pods now).
func (c *Cache) keepOnly(uids []string) {
	if c == nil {
		return
	}
	live := make(map[string]bool, len(uids))
	for _, u := range uids {
		live[u] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.m {
		if uid, _, _ := strings.Cut(name, string(os.PathSeparator)); !live[uid] {
			delete(c.m, name)
		}
	}
}
