package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A detached launcher records what it starts; StopRecorded ends exactly
// those processes, and never a process that merely reuses a recorded PID.
func TestStopRecorded(t *testing.T) {
	dir := t.TempDir()
	l := newLauncher(filepath.Join(dir, PIDFileName))
	defer l.close()
	p, err := startProc(l, "sleeper", "/bin/sleep", []string{"300"}, filepath.Join(dir, "sleeper.log"))
	if err != nil {
		t.Fatal(err)
	}
	// A live process recorded with another start time stands for a PID
	// that was reused after the recorded process ended: it must survive.
	bystander := exec.Command("/bin/sleep", "300")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bystander.Process.Kill(); _ = bystander.Wait() }()
	f, err := os.OpenFile(filepath.Join(dir, PIDFileName), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "bystander %d 1\n", bystander.Process.Pid)
	_ = f.Close()

	if err := StopRecorded(dir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded process still runs")
	}
	if _, err := startTime(bystander.Process.Pid); err != nil {
		t.Errorf("the process reusing a recorded PID was signalled: %v", err)
	}
}
