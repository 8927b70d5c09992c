package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// restart starts p's program again, exactly as before: same binary,
// arguments and log file (appended to). The configuration is in those
// arguments and the files they name, so the restarted process listens on
// the same ports. p must have exited.
func (l *launcher) restart(p *proc) (*proc, error) {
	if !p.exited() {
		return nil, fmt.Errorf("restarting %s: pid %d is still running", p.name, p.pid())
	}
	return spawn(l, p.name, p.bin, p.args, p.log, p.pid())
}

// record writes a started process to the PID file. A restarted process
// takes its predecessor's line rather than a new last one: StopRecorded
// stops newest line first, and a restarted kube-apiserver must still stop
// after the components that use it, as at the first start.
func (l *launcher) record(name string, pid, replaces int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if replaces == 0 {
		return recordPID(l.pidFile, name, pid)
	}
	return replacePID(l.pidFile, name, replaces, pid)
}

// replacePID rewrites the PID file with name's line for oldPID now naming
// newPID (appended if there is no such line). The file is replaced by a
// rename, so a reader never sees half of it.
func replacePID(path, name string, oldPID, newPID int) error {
	start, err := startTime(newPID)
	if err != nil {
		return fmt.Errorf("recording %s (pid %d): %w", name, newPID, err)
	}
	data, err := os.ReadFile(path) // #nosec G304 -- the cluster's own PID file
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	line := fmt.Sprintf("%s %d %d", name, newPID, start)
	prefix := name + " " + strconv.Itoa(oldPID) + " "
	var out strings.Builder
	found := false
	for l := range strings.Lines(string(data)) {
		if !found && strings.HasPrefix(l, prefix) {
			l, found = line+"\n", true
		}
		out.WriteString(l)
	}
	if !found {
		out.WriteString(line + "\n")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pids-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(out.String())
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("recording %s (pid %d): %w", name, newPID, err)
	}
	return nil
}
