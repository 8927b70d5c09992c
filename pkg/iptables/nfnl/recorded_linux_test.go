package nfnl_test

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/test/oldiptables"
)

var record = flag.Bool("record", false, "rewrite testdata/releases from the programs of the releases oldiptables.Recorded names")

// TestRecordedReleases: for every release no Debian suite serves
// (oldiptables.Recorded), every parity spec and family written over
// netlink in its layout is, as the kernel dumps it, what that release's
// own iptables-nft-restore wrote when the record was made. With -record
// (the release's programs named by its variable), the two writes are
// first required to be equal, then the record is rewritten.
func TestRecordedReleases(t *testing.T) {
	for _, rel := range oldiptables.Recorded() {
		t.Run(rel.Version, func(t *testing.T) {
			l, ok := nfnl.LayoutOf(rel.Version)
			if !ok {
				t.Fatalf("nfnl lays out no rules as iptables %s writes them", rel.Version)
			}
			path := filepath.Join("testdata", "releases", rel.Version+".dump.gz")
			got := writtenAs(t, l)
			if *record {
				by := unpacked(rel.Version, l, rel.Find(t, "../../.."))
				version, err := by.run(t.Context(), nil, "iptables-nft-restore", "--version")
				if err != nil {
					t.Fatal(err)
				}
				got = recordFrom(t, by, got)
				writeRecord(t, path, recordText(strings.TrimSpace(string(version)), kernel(t), got))
			}
			want, madeOn := readRecord(t, path)
			if k := kernel(t); madeOn != k {
				t.Logf("the record was made on Linux %s, this is %s: should every dump differ alike, the kernel dumps differently and the record wants remaking (docs/testing.md)", madeOn, k)
			}
			for _, name := range slices.Sorted(maps.Keys(got)) {
				w, ok := want[name]
				switch {
				case !ok:
					t.Errorf("%s: not in %s; record it with -record", name, path)
				case got[name] != w:
					t.Errorf("%s: written as %s, the kernel's dump differs from the record\n%s", name, rel.Version, lineDiff(got[name], w))
				}
			}
			for name := range want {
				if _, ok := got[name]; !ok {
					t.Errorf("%s: recorded in %s, no longer a parity spec", name, path)
				}
			}
		})
	}
}

// writtenAs is the kernel's dump of every parity spec and family written
// over netlink in layout l, each in a namespace of its own, by
// "spec/family".
func writtenAs(t *testing.T, l nfnl.Layout) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, spec := range iptablestest.ParitySpecs() {
		for _, rs := range iptables.Build(spec, true, true).Rulesets() {
			n := newNS(t)
			if err := write(n, rs, l); err != nil {
				t.Fatalf("%s/%s: %v", name, rs.Family, err)
			}
			out[name+"/"+rs.Family.String()] = dumpIn(t, n, rs.Family)
		}
	}
	return out
}

// recordFrom is what rel's iptables-nft-restore writes for every parity
// spec and family, which must be byNetlink, the netlink writer's.
func recordFrom(t *testing.T, rel iptablesRelease, byNetlink map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, spec := range iptablestest.ParitySpecs() {
		for _, rs := range iptables.Build(spec, true, true).Rulesets() {
			key := name + "/" + rs.Family.String()
			n := newNS(t)
			restore(t, n, rs, rel)
			out[key] = dumpIn(t, n, rs.Family)
			if out[key] != byNetlink[key] {
				t.Fatalf("%s: iptables %s's restore and the netlink writer in its layout write differently; not recorded\n%s", key, rel.version, lineDiff(byNetlink[key], out[key]))
			}
		}
	}
	return out
}

// dumpIn is the kernel's dump of family f in n, ending in one newline.
func dumpIn(t *testing.T, n ns.NetNS, f iptables.Family) string {
	t.Helper()
	var d string
	if err := n.Do(func(ns.NetNS) error {
		var err error
		d, err = nfnl.Dump(familyOf(f))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(d, "\n") + "\n"
}

// kernel is the running kernel's release.
func kernel(t *testing.T) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// recordText is a record's file: a header naming the release's program
// and the kernel, then each spec and family's dump under a
// "== spec/family" line, sorted.
func recordText(version, kernel string, dumps map[string]string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# What %s writes for each parity spec and family, as the\n", version)
	sb.WriteString("# kernel dumps it (nfnl.Dump). Made by `go test ./pkg/iptables/nfnl -run\n")
	sb.WriteString("# TestRecordedReleases -record` with the release's programs (test/oldiptables\n")
	sb.WriteString("# Recorded), which first requires the netlink writer's dump to be the same.\n")
	sb.WriteString(kernelLine + kernel + "\n")
	for _, name := range slices.Sorted(maps.Keys(dumps)) {
		sb.WriteString("== " + name + "\n" + dumps[name])
	}
	return sb.String()
}

// writeRecord writes a record gzipped: its 44 dumps are 600 kB of
// hex-encoded attributes, mostly the same lines.
func writeRecord(t *testing.T, path, text string) {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

const kernelLine = "# made on Linux "

// readRecord reads a record: its dumps by "spec/family", and the kernel
// it was made on.
func readRecord(t *testing.T, path string) (dumps map[string]string, kernel string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v: record it with -record", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	var name string
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.HasPrefix(line, kernelLine):
			kernel = strings.TrimSpace(strings.TrimPrefix(line, kernelLine))
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "== "):
			name = strings.TrimSpace(strings.TrimPrefix(line, "== "))
			out[name] = ""
		case name != "":
			out[name] += line
		}
	}
	return out, kernel
}
