package applied

import (
	"os"
	"path/filepath"
	"slices"
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
	m    map[string]map[string]cached // by pod UID, then file name
	hits int                          // reads the cache answered (its tests count them)
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
func NewCache() *Cache { return &Cache{m: map[string]map[string]cached{}, now: time.Now} }

func statID(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), // #nosec G115 -- a file's size
		mtimeSec: st.Mtim.Sec, mtimeNsec: st.Mtim.Nsec, ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}
}

// read is readRecord of file, in dir, which is podUID's directory in
// root: from the cache when file is the one read before.
func (c *Cache) read(root *os.Root, dir *os.File, podUID, file string) (Record, bool) {
	name := filepath.Join(podUID, file)
	if c == nil {
		r, _, ok, _ := readRecord(root, name)
		return r, ok
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), file, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		c.mu.Lock()
		hit, found := c.m[podUID][file]
		if found && hit.id == statID(&st) {
			c.hits++
			c.mu.Unlock()
			return hit.r, hit.ok
		}
		c.mu.Unlock()
	}
	// The time before the read: a change within settle of it may not show
	// in what stat says of the file.
	asOf := c.now()
	r, id, ok, ioErr := readRecord(root, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ioErr == nil && asOf.Sub(time.Unix(id.ctimeSec, id.ctimeNsec)) >= settle {
		if c.m[podUID] == nil {
			c.m[podUID] = map[string]cached{}
		}
		c.m[podUID][file] = cached{id: id, r: r, ok: ok}
	} else {
		delete(c.m[podUID], file)
	}
	return r, ok
}

// keepNames forgets podUID's records whose files are not in names (its
// directory now).
func (c *Cache) keepNames(podUID string, names []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for file := range c.m[podUID] {
		if !slices.Contains(names, file) {
			delete(c.m[podUID], file)
		}
	}
}

// keepPods forgets the records of the pods live says are gone.
func (c *Cache) keepPods(live func(podUID string) bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.m {
		if !live(uid) {
			delete(c.m, uid)
		}
	}
}
