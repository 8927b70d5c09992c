package childcaps

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// capLine reads one Cap* line of a /proc status.
func capLine(t *testing.T, status, key string) uint64 {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in\n%s", key, status)
	return 0
}

// TestLimit runs in a child of the test (the drop is for the whole
// process and cannot be undone): after Limit, the child keeps its own
// capabilities, and what it execs holds only NET_ADMIN and NET_RAW.
func TestLimit(t *testing.T) {
	if os.Getenv("CHILDCAPS_HELPER") == "1" {
		if err := Limit(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW); err != nil {
			t.Fatal(err)
		}
		self, _ := os.ReadFile("/proc/self/status")
		child, err := exec.Command("cat", "/proc/self/status").Output()
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW)
		if got := capLine(t, string(child), "CapEff"); got != want {
			t.Errorf("the child's CapEff %#x, want %#x (NET_ADMIN, NET_RAW)", got, want)
		}
		if got := capLine(t, string(self), "CapEff"); got&(1<<unix.CAP_SYS_ADMIN) == 0 {
			t.Errorf("Limit took the caller's own CAP_SYS_ADMIN: CapEff %#x", got)
		}
		// Again, with SETPCAP gone: nothing left to drop, no error.
		if err := Limit(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW); err != nil {
			t.Errorf("a second Limit: %v", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root's capabilities")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLimit$", "-test.v")
	cmd.Env = append(os.Environ(), "CHILDCAPS_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}
