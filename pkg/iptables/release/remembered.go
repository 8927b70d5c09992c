package release

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A cache file holds two lines: the program's Key, then its release
// ("1.8.9"). Only an nf_tables program's release is ever remembered, so
// a hit also says the program is nf_tables.

// Remembered returns the release remembered in cacheFile for the program
// name at path ("" on a miss, or when it was remembered for another
// file) and the key the program has now. It costs one stat and one small
// read, and needs no walk of the symlinks: the file they lead to is in
// the key.
func Remembered(cacheFile, name, path string) (release, key string, err error) {
	if key, err = Key(name, path); err != nil {
		return "", "", err
	}
	if b, err := readSmall(cacheFile); err == nil {
		if k, v, ok := strings.Cut(strings.TrimSpace(string(b)), "\n"); ok && k == key && v != "" {
			return v, key, nil
		}
	}
	return "", key, nil
}

// Remember writes release into cacheFile under key, atomically: a reader
// sees the old file or the new one.
func Remember(cacheFile, key, release string) error {
	f, err := os.CreateTemp(filepath.Dir(cacheFile), "."+filepath.Base(cacheFile)+".*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(key + "\n" + release + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), cacheFile)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// Key is the cache key of the program name found at path: the file the
// path leads to, as the kernel has it (device, inode, size, modification
// and change times: a rewrite in place changes its change time, whatever
// it does to the rest).
func Key(name, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return fmt.Sprintf("%s %s %d:%d %d %d %d", name, path, st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()), nil
}

// readSmall reads a file of at most 4 KiB with plain system calls: in the
// shim, os.Open would start Go's poller for this one read.
func readSmall(path string) ([]byte, error) {
	// Not a FIFO to wait on, nor a link to follow out of cache_dir.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	buf := make([]byte, 4<<10)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return buf[:n], nil
		}
		n += m
	}
	return nil, fmt.Errorf("%s is over %d bytes", path, len(buf))
}
