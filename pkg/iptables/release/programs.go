package release

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// sbinDirs are searched after PATH: container runtimes may exec plugins
// with a PATH that lacks the sbin directories where iptables lives.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// LookPath finds a program in PATH as exec.LookPath does (a name with a
// slash is itself; the search ends, refused, at a match in a relative
// directory), or else in the sbin directories. It is
// written out because os/exec costs every process that links it about
// 25 µs of start-up (BENCHMARKS.md).
func LookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if executable(name) {
			return name, nil
		}
		return "", fmt.Errorf("%s is not an executable file", name)
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, name); executable(p) {
			if !filepath.IsAbs(p) {
				break // exec.LookPath's ErrDot
			}
			return p, nil
		}
	}
	for _, dir := range sbinDirs {
		if p := filepath.Join(dir, name); executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %v", name, sbinDirs)
}

// executable: a file, not a directory, that someone may execute.
func executable(path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Mode&0o111 != 0
}

// BackendAt is the implementation of the program at path, which leads to
// real: its names say (xtables-nft-multi, iptables-legacy-restore, ...),
// else a link to a name with nft in it; else legacy (iptables before 1.8).
func BackendAt(path, real string) string {
	for _, name := range []string{filepath.Base(path), filepath.Base(real)} {
		switch {
		case strings.Contains(name, "nft"):
			return NFT
		case strings.Contains(name, "legacy"):
			return Legacy
		}
	}
	if link, err := os.Readlink(path); err == nil && strings.Contains(link, "nft") {
		return NFT
	}
	return Legacy
}
