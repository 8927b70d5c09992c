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
// program's resolved path, size and modification time, so that only the
// first call after the node's iptables changes runs it. The file is
// replaced atomically; an unreadable or stale one is rewritten.
func CachedNFTVersion(cacheFile, name string) (string, error) {
	_, real, err := locate(name)
	if err != nil {
		return "", err
	}
	return cachedNFTVersionAt(cacheFile, name, real, true)
}

// cachedNFTVersionAt is CachedNFTVersion for the program name, located at
// real; run=false returns "" on a miss instead of running it.
func cachedNFTVersionAt(cacheFile, name, real string, run bool) (string, error) {
	v, key, err := cachedNFTVersion(cacheFile, name, real)
	if err != nil || v != "" || !run {
		return v, err
	}
	if v, err = NFTVersion(name); err != nil {
		return "", err
	}
	// A failed write only costs the next call a run.
	_ = writeAtomic(cacheFile, []byte(key+"\n"+v+"\n"))
	return v, nil
}

// cachedNFTVersion returns the cached version ("" on a miss) and the key
// the program, located at real, has now.
func cachedNFTVersion(cacheFile, name, real string) (version, key string, err error) {
	st, err := os.Stat(real)
	if err != nil {
		return "", "", err
	}
	key = fmt.Sprintf("%s %s %d %d", name, real, st.Size(), st.ModTime().UnixNano())
	if b, err := os.ReadFile(cacheFile); err == nil { // #nosec G304 -- the plugin's own cache_dir
		if k, v, ok := strings.Cut(strings.TrimSpace(string(b)), "\n"); ok && k == key && v != "" {
			return v, key, nil
		}
	}
	return "", key, nil
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
	// One lookup serves the backend and the release: the shim and ADD
	// pay for it on every pod.
	name := b.CommandsFor(f).Restore
	path, real, err := locate(name)
	if err != nil {
		return err
	}
	if r := backendAt(path, real); b == Auto && r != NFT {
		return fmt.Errorf("%s backend %s", f, r)
	}
	v, err := cachedNFTVersionAt(filepath.Join(cacheDir, name+".version"), name, real, run)
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
