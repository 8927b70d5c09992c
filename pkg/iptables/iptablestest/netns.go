package iptablestest

import (
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// NewNS is a fresh network namespace, gone when the test ends; it skips
// the test unless run as root.
func NewNS(t testing.TB) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	return n
}

// BenchReads runs each read as a sub-benchmark of b, looped in n: the
// kernel readers' benchmarks time theirs beside the save they spare.
func BenchReads(b *testing.B, n ns.NetNS, reads map[string]func() error) {
	for name, read := range reads {
		b.Run(name, func(b *testing.B) {
			if err := n.Do(func(ns.NetNS) error {
				for b.Loop() {
					if err := read(); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// LineDiff lists the lines where got and want differ, each pair under
// the names given: the kernel writers' tests compare a write with
// iptables-restore's so.
func LineDiff(got, want, gotName, wantName string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			b.WriteString(gotName + ": " + gl + "\n" + wantName + ": " + wl + "\n")
		}
	}
	return b.String()
}
