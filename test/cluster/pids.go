package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PIDFileName is the file in a detached cluster's directory that lists the
// processes it started, one "name pid starttime" line each.
const PIDFileName = "pids"

func pidFileFor(o Options) string {
	if !o.Detach {
		return ""
	}
	return filepath.Join(o.Dir, PIDFileName)
}

// recordPID appends a started process. Its start time (clock ticks since
// boot) tells it apart from a later process that reuses the PID.
func recordPID(path, name string, pid int) error {
	start, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("recording %s (pid %d): %w", name, pid, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %d %d\n", name, pid, start)
	return errors.Join(err, f.Close())
}

// startTime is field 22 of /proc/<pid>/stat; a zombie counts as gone.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, os.ErrProcessDone
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

type recorded struct {
	name  string
	pid   int
	start uint64
}

// StopRecorded ends the processes a detached cluster in dir started, newest
// first, each by its recorded PID, and only while that PID is still the
// same process: SIGTERM, then SIGKILL after grace.
func StopRecorded(dir string, grace time.Duration) error {
	procs, err := readRecorded(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range slices.Backward(procs) {
		errs = append(errs, r.stop(grace))
	}
	return errors.Join(errs...)
}

func readRecorded(dir string) ([]recorded, error) {
	f, err := os.Open(filepath.Join(dir, PIDFileName))
	if err != nil {
		return nil, err
	}
	var procs []recorded
	s := bufio.NewScanner(f)
	for s.Scan() {
		var r recorded
		if _, err := fmt.Sscanf(s.Text(), "%s %d %d", &r.name, &r.pid, &r.start); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("%s: line %q: %w", f.Name(), s.Text(), err)
		}
		procs = append(procs, r)
	}
	_ = f.Close()
	return procs, s.Err()
}

func (r recorded) alive() bool {
	start, err := startTime(r.pid)
	return err == nil && start == r.start
}

func (r recorded) stop(grace time.Duration) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if !r.alive() {
			return nil
		}
		if err := syscall.Kill(r.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%v to %s (pid %d): %w", sig, r.name, r.pid, err)
		}
		deadline := time.Now().Add(grace)
		for r.alive() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if r.alive() {
		return fmt.Errorf("%s (pid %d) still running after SIGKILL", r.name, r.pid)
	}
	return nil
}
