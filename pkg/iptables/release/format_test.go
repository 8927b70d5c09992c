package release

import (
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/test/formats"
)

// TestCacheFileFormatIsItsVersion: the file the shim and the plugin of
// either build read. Its version 1 carries no number: a reader takes the
// first line for the program's key, so a later format starts with a line
// no key can be (a version line), and a reader of this one misses on it
// and learns the release again: one exec, never a wrong release. See
// test/formats.
func TestCacheFileFormatIsItsVersion(t *testing.T) {
	formats.Check(t, "release-cache", 1, string(File("iptables-nft-save /usr/sbin/iptables-nft-save 2049:131 225720 1700000000 1700000001", "1.8.9")))
	for _, future := range []string{"v2\niptables /usr/sbin/iptables 1:1 1 1 1\n1.8.9\n"} {
		if _, ok := parseCache([]byte(future), "iptables /usr/sbin/iptables 1:1 1 1 1"); ok {
			t.Errorf("a later format %q was read as a release", future)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "iptables-restore.version"), []byte(future), 0o600); err != nil {
			t.Fatal(err)
		}
		if v := Recalled(dir, false); v != "" {
			t.Errorf("the agent recalls %q from a later format %q", v, future)
		}
	}
}
