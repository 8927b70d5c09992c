// Package oldiptables runs other Debian releases' iptables beside the
// machine's own, from where fetch.sh unpacked them (nothing installed):
// for the tests that compare what each release writes and reads.
package oldiptables

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Release is an iptables fetch.sh unpacks.
type Release struct {
	Version string
	env     string // its directory; make test sets it, and then a missing release fails the test
	target  string // the make target that unpacks it
	// ownLibc: it needs a newer glibc than the machine's, and runs
	// through its own glibc's loader.
	ownLibc bool
}

// Releases are the unpacked ones: bullseye's 1.8.7 and trixie's 1.8.11.
// The machine's own is bookworm's 1.8.9.
func Releases() []Release {
	return []Release{
		{Version: "1.8.7", env: "ISTIO_CNI_OLD_IPTABLES", target: "old-iptables"},
		{Version: "1.8.11", env: "ISTIO_CNI_NEWER_IPTABLES", target: "newer-iptables", ownLibc: true},
	}
}

// Recorded are the releases make test does not unpack: Amazon Linux
// 2023's 1.8.8, Ubuntu 24.04's and RHEL 9's 1.8.10, 1.8.12, and Debian
// forky's 1.8.13. The tests hold what the netlink writer writes as them
// to a record of what their own iptables-nft-restore wrote
// (pkg/iptables/nfnl/testdata/releases), made with programs built from
// the release's tag (1.8.8, 1.8.10, 1.8.12) or unpacked from forky
// (1.8.13), laid out as fetch.sh unpacks a release (usr/sbin,
// usr/lib/<arch>, a newer glibc's own files beside all but 1.8.8's);
// their variables name them only to make a record.
func Recorded() []Release {
	return []Release{
		{Version: "1.8.8", env: "ISTIO_CNI_IPTABLES_1_8_8"},
		{Version: "1.8.10", env: "ISTIO_CNI_IPTABLES_1_8_10", ownLibc: true},
		{Version: "1.8.12", env: "ISTIO_CNI_IPTABLES_1_8_12", ownLibc: true},
		{Version: "1.8.13", env: "ISTIO_CNI_IPTABLES_1_8_13", ownLibc: true},
	}
}

// Named says whether the release's variable names its programs: a
// recorded release's then runs live beside the unpacked ones.
func (rel Release) Named() bool {
	_, ok := os.LookupEnv(rel.env)
	return ok
}

// Programs runs one unpacked release's programs by the names iptables
// gives them (iptables-nft-restore, ip6tables-legacy-save, ...), with its
// own libraries and extension modules, never the machine's.
type Programs struct {
	sbin, libs, exts string
	loader           string // its own glibc's ld.so, or "" for the machine's glibc
}

// Command is the program name run with args, with no environment but
// what the release needs.
func (p Programs) Command(name string, args ...string) (*exec.Cmd, error) {
	if strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("%s: not a program name", name)
	}
	prog := filepath.Join(p.sbin, name)
	if p.loader == "" {
		cmd := exec.Command(prog, args...) // #nosec G204 -- the test's own unpacked binary
		cmd.Env = []string{"LD_LIBRARY_PATH=" + p.libs, "XTABLES_LIBDIR=" + p.exts}
		return cmd, nil
	}
	// argv[0] stays the program's name: xtables-*-multi dispatches on it.
	cmd := exec.Command(p.loader, append([]string{"--library-path", p.libs, "--argv0", name, prog}, args...)...) // #nosec G204 -- as above
	cmd.Env = []string{"XTABLES_LIBDIR=" + p.exts}
	return cmd, nil
}

// Find finds the release where its variable, or else `make`, put it
// (root is the repository's), and checks that both backends' restore
// programs are that release: a missing release skips the test, or fails
// it under make test.
func (rel Release) Find(t testing.TB, root string) Programs {
	t.Helper()
	dir, required := os.LookupEnv(rel.env)
	if !required {
		dir = filepath.Join(root, "_output", "tools", "iptables-"+rel.Version)
	}
	how := "run `make " + rel.target + "`"
	if rel.target == "" {
		how = "build it from its release tag, or unpack it (docs/testing.md)"
	}
	missing := func(what string) {
		t.Helper()
		if required {
			t.Fatalf("%s=%s holds no unpacked iptables %s (%s); %s", rel.env, dir, rel.Version, what, how)
		}
		t.Skipf("no iptables %s in %s (%s): %s", rel.Version, dir, what, how)
	}
	libs, _ := filepath.Glob(filepath.Join(dir, "usr", "lib", "*", "libxtables.so.12"))
	if len(libs) != 1 {
		missing(fmt.Sprintf("%d libxtables found", len(libs)))
	}
	lib := filepath.Dir(libs[0])
	p := Programs{sbin: filepath.Join(dir, "usr", "sbin"), libs: lib, exts: filepath.Join(lib, "xtables")}
	if rel.ownLibc {
		lds, _ := filepath.Glob(filepath.Join(lib, "ld-linux*.so.*"))
		if len(lds) != 1 {
			missing(fmt.Sprintf("%d glibc loaders found", len(lds)))
		}
		p.loader = lds[0]
	}
	for _, name := range []string{"iptables-nft-restore", "iptables-legacy-restore"} {
		cmd, err := p.Command(name, "--version")
		var out []byte
		if err == nil {
			out, err = cmd.Output()
		}
		if err != nil || !strings.Contains(string(out), " v"+rel.Version+" ") {
			missing(fmt.Sprintf("%s --version: %q, %v", name, out, err))
		}
	}
	return p
}
