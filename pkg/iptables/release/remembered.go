package release

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// A cache file holds two lines: the program's Key, then its release
// ("1.8.9"). That is its format's version 1, which carries no number
// (format_test.go): anything else is a miss. Only an nf_tables program's release is ever remembered, so
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
		if v, ok := parseCache(b, key); ok {
			return v, key, nil
		}
	}
	return "", key, nil
}

// parseCache reads a cache file's release for key: exactly the two lines
// File writes, else a miss (another program, or another format).
func parseCache(b []byte, key string) (string, bool) {
	k, v, ok := splitCache(b)
	return v, ok && k == key
}

// splitCache splits a cache file into its key and release.
func splitCache(b []byte) (key, release string, ok bool) {
	k, v, ok := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if !ok || v == "" || strings.Contains(v, "\n") {
		return "", "", false
	}
	return k, v, true
}

// Recalled is the release the plugin last remembered in cacheDir for a
// family's own iptables (Auto's program: the installer's entry pins no
// backend), whatever file that program is now: for the node agent, whose
// container does not see the node's programs to key them; the agent uses
// it only for rules in nf_tables, which a later switch of the node's
// alternatives to legacy leaves as the same release wrote them. "" when
// none is: the node's program was legacy at every ADD, or the plugin has
// run none since the cache was emptied.
func Recalled(cacheDir string, ipv6 bool) string {
	name, _ := Auto.Programs(ipv6)
	raw, err := readSmall(path.Join(cacheDir, name+".version"))
	if err != nil {
		return ""
	}
	if k, v, ok := splitCache(raw); ok && strings.HasPrefix(k, name+" ") {
		return v
	}
	return ""
}

// File is what a cache file holds for release remembered under key.
func File(key, release string) []byte {
	return []byte(key + "\n" + release + "\n")
}

// Key is the cache key of the program name found at path: the file the
// path leads to, as the kernel has it (device, inode, size, modification
// and change times: a rewrite in place changes its change time, whatever
// it does to the rest).
func Key(name, path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", errors.New("stat " + path + ": " + err.Error())
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return name + " " + path + " " + u(st.Dev) + ":" + u(st.Ino) + " " + i(st.Size) + " " + i(st.Mtim.Nano()) + " " + i(st.Ctim.Nano()), nil
}

// u prints a Stat_t field whose width is the architecture's (Dev is a
// uint32 on mips).
func u[T ~uint32 | ~uint64](v T) string { return strconv.FormatUint(uint64(v), 10) }

// readSmall reads a file of at most 4 KiB with plain system calls.
func readSmall(path string) ([]byte, error) {
	// Not a FIFO to wait on, nor a link to follow out of cache_dir.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = syscall.Close(fd) }()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, errors.New(path + " is not a regular file")
	}
	buf := make([]byte, 4<<10)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if errors.Is(err, syscall.EINTR) {
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
	return nil, errors.New(path + " is over 4096 bytes")
}
