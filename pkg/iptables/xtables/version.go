package xtables

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
)

// parseVersion reads how iptables 1.8 programs print their version,
// "iptables-restore v1.8.9 (nf_tables)", into "1.8.9" and "nf_tables".
// (No regexp: its compilation would run at every plugin start.)
func parseVersion(out []byte) (version, kind string, ok bool) {
	f := strings.Fields(firstLine(out))
	if len(f) != 3 || !strings.HasPrefix(f[1], "v") || !strings.HasPrefix(f[2], "(") || !strings.HasSuffix(f[2], ")") {
		return "", "", false
	}
	version, kind = f[1][1:], f[2][1:len(f[2])-1]
	parts := strings.Split(version, ".")
	if len(parts) != 3 || (kind != "nf_tables" && kind != "legacy") {
		return "", "", false
	}
	for _, p := range parts {
		if _, err := strconv.Atoi(p); err != nil {
			return "", "", false
		}
	}
	return version, kind, true
}

// NFTVersion runs "name --version" and returns the iptables release of an
// nf_tables program ("1.8.9"); a legacy program or one printing anything
// else is an error.
func NFTVersion(name string) (string, error) {
	path, err := LookPath(name)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := run(exec.CommandContext(ctx, path, "--version"), name, nil)
	if err != nil {
		return "", err
	}
	v, kind, ok := parseVersion(out)
	if !ok {
		return "", fmt.Errorf("%s --version printed %q, not \"<name> v<version> (nf_tables|legacy)\"", name, firstLine(out))
	}
	if kind != "nf_tables" {
		return "", fmt.Errorf("%s is iptables %s (%s), not nf_tables", path, v, kind)
	}
	return v, nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// CachedNFTVersion is NFTVersion remembered in cacheFile, keyed by the
// program's path and the identity of the file it leads to (device, inode,
// size, modification and change times), so that only the first call
// after the node's iptables changes runs it. The file is replaced
// atomically; an unreadable or stale one is rewritten.
func CachedNFTVersion(cacheFile, name string) (string, error) {
	path, err := LookPath(name)
	if err != nil {
		return "", err
	}
	v, key, err := cachedNFTVersion(cacheFile, name, path)
	if err != nil || v != "" {
		return v, err
	}
	return rememberNFTVersion(cacheFile, name, path, key)
}

// rememberNFTVersion runs NFTVersion and remembers its answer under key,
// the identity the program had before it ran; a program that changed
// while it ran (the alternatives switched) is an error, never
// remembered: the answer may be the other file's.
func rememberNFTVersion(cacheFile, name, path, key string) (string, error) {
	v, err := NFTVersion(name)
	if err != nil {
		return "", err
	}
	after, err := identity(name, path)
	if err != nil {
		return "", err
	}
	if after != key {
		return "", fmt.Errorf("%s changed while its release was read", path)
	}
	// A failed write only costs the next call a run.
	_ = writeAtomic(cacheFile, []byte(key+"\n"+v+"\n"))
	return v, nil
}

// cachedNFTVersion returns the cached version ("" on a miss) and the key
// the program at path has now. Only an nf_tables program's release is
// ever remembered (NFTVersion refuses the others), so a hit also says the
// program is nf_tables. It costs one stat and one small read: the shim
// asks on every pod, and the symlinks need no walk, since the file they
// lead to is in the key.
func cachedNFTVersion(cacheFile, name, path string) (version, key string, err error) {
	if key, err = identity(name, path); err != nil {
		return "", "", err
	}
	if b, err := readSmall(cacheFile); err == nil {
		if k, v, ok := strings.Cut(strings.TrimSpace(string(b)), "\n"); ok && k == key && v != "" {
			return v, key, nil
		}
	}
	return "", key, nil
}

// identity is the cache key of the program name found at path: the file
// the path leads to, as the kernel has it (a rewrite in place changes its
// change time, whatever it does to the rest).
func identity(name, path string) (string, error) {
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

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// NetlinkWritable says why a family's rules cannot be written over
// netlink (pkg/iptables/nfnl) on this node, or nil: the backend resolves
// to nf_tables, at the iptables release whose layout nfnl writes, so that
// iptables-save prints them as iptables-restore wrote them. The release
// is remembered in cacheDir; run=false never runs the program, and a
// release not remembered is a no.
func NetlinkWritable(b Backend, f iptables.Family, cacheDir string, run bool) error {
	if cacheDir == "" {
		return errors.New("no cache_dir")
	}
	if b == Legacy {
		return fmt.Errorf("%s backend %s", f, b)
	}
	// The shim and ADD ask on every pod: a remembered release costs a
	// lookup on PATH, a stat and a small read (only an nf_tables
	// program's release is remembered); the symlinks are walked, to tell
	// the backend, only when it is not.
	name := b.CommandsFor(f).Restore
	path, err := LookPath(name)
	if err != nil {
		return err
	}
	cacheFile := filepath.Join(cacheDir, name+".version")
	v, key, err := cachedNFTVersion(cacheFile, name, path)
	if err == nil && v == "" {
		real, lerr := filepath.EvalSymlinks(path)
		if lerr != nil {
			return fmt.Errorf("resolving %s: %w", path, lerr)
		}
		if r := backendAt(path, real); b == Auto && r != NFT {
			return fmt.Errorf("%s backend %s", f, r)
		}
		if run {
			// Remembered under the identity taken before the backend
			// was told: a switch since is caught after the run.
			v, err = rememberNFTVersion(cacheFile, name, path, key)
		}
	}
	switch {
	case err != nil:
		return err
	case v == "":
		return fmt.Errorf("%s's release is not in %s yet", name, cacheDir)
	case !nfnl.WritesLayoutOf(v):
		return fmt.Errorf("%s is iptables %s, whose layout is not %s's", name, v, nfnl.Layout)
	}
	return nil
}
