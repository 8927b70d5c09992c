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
