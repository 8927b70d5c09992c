package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// launcher forks every child from one goroutine locked to its OS thread.
// Pdeathsig fires when the *thread* that forked the child exits, not the
// process: a child forked from an ordinary thread would be killed as soon as
// some other goroutine locks that thread (netns code does) and exits with it
// still locked. A dedicated locked thread lives exactly as long as the cluster,
// so the children die with the test process and not before.
//
// A detached launcher (the demo's node, which outlives `make demo`) starts
// children in their own session without Pdeathsig and records each one in
// pidFile, for StopRecorded.
type launcher struct {
	reqs    chan *exec.Cmd
	errs    chan error
	pidFile string // "" unless detached
	// enter, when set, runs every child through it: nsenter into a fleet
	// node's namespaces (see nodeNS.enter).
	enter []string

	// mu orders starts against close (a restart may race Stop) and
	// serializes writes to pidFile.
	mu     sync.Mutex
	closed bool
}

func newLauncher(pidFile string) *launcher {
	l := &launcher{reqs: make(chan *exec.Cmd), errs: make(chan error), pidFile: pidFile}
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: when close() ends the loop the thread exits,
		// SIGKILLing (via Pdeathsig) any child that Stop failed to reap.
		for cmd := range l.reqs {
			l.errs <- cmd.Start()
		}
	}()
	return l
}

// command is exec.Command(bin, args...), entered into the launcher's
// namespaces if it has any. nsenter execs bin, so the PID is bin's.
func (l *launcher) command(bin string, args []string) *exec.Cmd {
	if len(l.enter) == 0 {
		return exec.Command(bin, args...)
	}
	full := append(append(append([]string{}, l.enter[1:]...), bin), args...)
	return exec.Command(l.enter[0], full...) // #nosec G204 -- the harness's own nsenter line
}

func (l *launcher) start(cmd *exec.Cmd) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("the cluster is stopped")
	}
	l.reqs <- cmd
	return <-l.errs
}

func (l *launcher) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.reqs)
	}
}

// proc is one child process, its log file and its exit.
type proc struct {
	name string
	cmd  *exec.Cmd
	// bin and args are what was started, before any nsenter (restart).
	bin  string
	args []string
	log  string
	done chan struct{} // closed once the process has been reaped
	err  error         // Wait's result; valid after done
}

// startProc runs bin in its own process group with stdout and stderr
// appended to logPath.
func startProc(l *launcher, name, bin string, args []string, logPath string) (*proc, error) {
	return spawn(l, name, bin, args, logPath, 0)
}

// spawn is startProc; in a detached cluster, a non-zero replaces is the
// PID whose line in the PID file the new process takes over (see restart).
func spawn(l *launcher, name, bin string, args []string, logPath string, replaces int) (*proc, error) {
	p, err := spawnCmd(l, name, l.command(bin, args), logPath, replaces)
	if err == nil {
		p.bin, p.args = bin, args
	}
	return p, err
}

// spawnIn is startProc in directory dir, with env added to this
// process's environment.
func spawnIn(l *launcher, name, bin string, args []string, logPath, dir string, env []string) (*proc, error) {
	cmd := l.command(bin, args)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	p, err := spawnCmd(l, name, cmd, logPath, 0)
	if err == nil {
		p.bin, p.args = bin, args
	}
	return p, err
}

func spawnCmd(l *launcher, name string, cmd *exec.Cmd, logPath string, replaces int) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if l.pidFile != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := l.start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if l.pidFile != "" {
		if err := l.record(name, cmd.Process.Pid, replaces); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, err
		}
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an unexpected exit, with the tail of the log.
func (p *proc) exitError() error {
	return fmt.Errorf("%s (pid %d) exited: %v\n--- tail of %s ---\n%s", p.name, p.pid(), p.err, p.log, logTail(p.log, 30))
}

// stop sends SIGTERM to the process it started, waits up to grace, then
// sends SIGKILL. os.Process signals through a pidfd, so a recycled PID is
// never hit.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM %s (pid %d): %w", p.name, p.pid(), err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGKILL %s (pid %d): %w", p.name, p.pid(), err)
	}
	t.Reset(exitWait)
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s (pid %d) still running %v after SIGKILL", p.name, p.pid(), exitWait)
	}
}

// exitWait bounds stop's wait for a SIGKILLed component to be gone. Exit
// is usually immediate, but not on a loaded machine for a process in an
// uninterruptible sleep: a cold run's kubelet outlived a 10-second bound
// during a reboot, which then gave up with the node half down. The abort
// path (abort.go, kill.go) keeps its 10 s: it must end within AbortBudget.
const exitWait = time.Minute

// FreePorts returns n distinct ports free on 127.0.0.1, drawn outside the
// kernel's ephemeral range (quietRange). Another test process could still
// bind one before our child does; drawn at random from 12,000 ports, that
// is rare, where the ephemeral range's next port was not.
func FreePorts(n int) ([]int, error) {
	low, high := quietRange()
	ports := make([]int, 0, n)
	for draws := 0; len(ports) < n; draws++ {
		quiet := high > low && draws < 1000
		addr := "127.0.0.1:0"
		if quiet {
			addr = "127.0.0.1:" + strconv.Itoa(low+rand.IntN(high-low)) // #nosec G404 -- a test port, not a secret
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if quiet {
				continue // taken: another draw
			}
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer ln.Close() // held until all are picked, so they differ
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// quietRange is where FreePorts draws: below the kernel's ephemeral range,
// so that no process's outgoing connection takes a port between the draw
// and the component's bind (an ephemeral port free now may be a client's
// source port a second later). Empty when that range is too small.
func quietRange() (low, high int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err != nil || first <= 20000 {
		return 0, 0
	}
	return 20000, first
}

// logTail returns the last n lines of the file at path (at most 16 KiB).
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	const max = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return fmt.Sprintf("(cannot read log: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return "(log is empty)"
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
