package integration

import (
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/test/podsim"
)

func testproxy() string { return filepath.Join(env.binDir, "testproxy") }

// runIn runs a command in a namespace with stdin and fails the test on error.
func runIn(t *testing.T, netns, stdin, name string, args ...string) string {
	t.Helper()
	cmd := podsim.Command(netns, 0, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, netns, err, out)
	}
	return string(out)
}

// startIn starts the test proxy in a namespace as uid and stops it, by PID,
// at cleanup.
func startIn(t *testing.T, netns string, uid int, args ...string) {
	t.Helper()
	p, err := podsim.Start(netns, uid, testproxy(), env.dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
}

// connect returns the line the other end of a connection from a namespace
// wrote.
func connect(t *testing.T, netns string, uid int, addr string) string {
	t.Helper()
	line, err := podsim.Connect(netns, uid, testproxy(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return line
}
