package xtables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
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
	path, err := release.LookPath(name)
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

// CachedNFTVersion is NFTVersion remembered in cacheFile (release.File),
// keyed by the program's path and the identity of the file it leads to
// (release.Key), so that only the first call after the node's iptables
// changes runs it. An unreadable or stale file is rewritten.
func CachedNFTVersion(cacheFile, name string) (string, error) {
	path, err := release.LookPath(name)
	if err != nil {
		return "", err
	}
	v, key, err := release.Remembered(cacheFile, name, path)
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
	after, err := release.Key(name, path)
	if err != nil {
		return "", err
	}
	if after != key {
		return "", fmt.Errorf("%s changed while its release was read", path)
	}
	// A failed write only costs the next call a run.
	_ = writeAtomic(cacheFile, release.File(key, v))
	return v, nil
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

// NetlinkWritable returns the layout a family's rules are written over
// netlink in on this node (pkg/iptables/nfnl), or says why they cannot be
// (release.Writable). On a release not remembered, the symlinks are
// walked to tell the backend: release.Auto leading to legacy says so;
// then run=false never runs the program, and is a no, while run=true
// reads the release and remembers it.
func NetlinkWritable(b release.Backend, f iptables.Family, cacheDir string, run bool) (nfnl.Layout, error) {
	v, err := release.Writable(b, f == iptables.IPv6, cacheDir, func(cacheFile, name, path, key string) (string, error) {
		r, err := release.At(path)
		if err != nil {
			return "", err
		}
		if b != release.NFT && r != release.NFT {
			return "", fmt.Errorf("%s backend %s", f, r)
		}
		if !run {
			return "", nil
		}
		// Remembered under the identity taken before the backend was
		// told: a switch since is caught after the run.
		return rememberNFTVersion(cacheFile, name, path, key)
	})
	if err != nil {
		return nfnl.Layout{}, err
	}
	l, ok := nfnl.LayoutOf(v)
	if !ok {
		return nfnl.Layout{}, fmt.Errorf("iptables %s: no layout of it to write", v)
	}
	return l, nil
}
