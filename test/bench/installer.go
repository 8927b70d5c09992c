package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/test/cluster"
)

// installerBench measures how fast the installer repairs the node's CNI
// config: from the moment the primary CNI rewrites its file (or our
// conflist is deleted) until a conflist holding the new primary content and
// our entry sorts first. It runs the real install-cni binary on a fake
// node's directories and watches the directory itself, so the timing is
// event-driven, not polled.
func installerBench(n int) error {
	dir, err := os.MkdirTemp("", "istio-cni-installer-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	nd, err := newFakeNode(dir)
	if err != nil {
		return err
	}
	proc, logs, err := nd.startInstaller()
	if err != nil {
		return err
	}
	defer func() { _ = proc.Process.Signal(syscall.SIGTERM); _ = proc.Wait() }()
	if _, err := nd.waitFor(nd.ownedIs(func(string) bool { return true }), 30*time.Second); err != nil {
		return fmt.Errorf("initial install: %w\n%s", err, logs.String())
	}
	fmt.Printf("\n## Installer repair latency (%d events each; the installer runs with --conflict-repairs=1000000 so that these repeated undos are repaired rather than reported as a fight)\n\n", n)
	fmt.Println("| event | gap | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	for _, gap := range []time.Duration{time.Second, 100 * time.Millisecond} {
		for _, kind := range []string{"primary rewritten", "our conflist deleted", "token rotated", "foreign config sorts first"} {
			ds, err := nd.repairs(kind, gap, n)
			if err != nil {
				return fmt.Errorf("%s every %s: %w", kind, gap, err)
			}
			slices.Sort(ds)
			pct := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
			fmt.Printf("| %s | %s | %s | %s | %s |\n", kind, gap, ms(pct(0.5)), ms(pct(0.99)), ms(ds[len(ds)-1]))
		}
	}
	rss, hwm := procMemory(proc.Process.Pid)
	fmt.Printf("\nInstaller RSS after the runs: %.1f MB (peak %.1f MB).\n", float64(rss)/1024, float64(hwm)/1024)
	return nil
}

type fakeNode struct {
	root, bin, netd, kc, sa, src string
	w                            *fsnotify.Watcher
	serial                       int
}

func newFakeNode(root string) (*fakeNode, error) {
	nd := &fakeNode{root: root, bin: filepath.Join(root, "bin"), netd: filepath.Join(root, "net.d"),
		kc: filepath.Join(root, "run"), sa: filepath.Join(root, "sa"), src: filepath.Join(root, "image")}
	for _, d := range []string{nd.bin, nd.netd, nd.kc, nd.sa, nd.src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for pkg, name := range map[string]string{"./cmd/install-cni": "install-cni", "./cmd/plugin": install.PluginBinary,
		"./cmd/plugin/full": install.FullBinary, "./cmd/plugin/apilookup": install.LookupBinary} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(nd.src, name), pkg).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	}
	if err := nd.rotateToken(); err != nil {
		return nil, err
	}
	for _, f := range []string{"token", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(nd.sa, f)); err != nil {
			return nil, err
		}
	}
	if err := nd.writePrimary(); err != nil {
		return nil, err
	}
	var err error
	if nd.w, err = fsnotify.NewWatcher(); err != nil {
		return nil, err
	}
	if err := nd.w.Add(nd.kc); err != nil {
		return nil, err
	}
	return nd, nd.w.Add(nd.netd)
}

// rotateToken writes a new projected token the way the kubelet's atomic
// writer does: a new timestamped directory, then ..data swapped by rename.
func (nd *fakeNode) rotateToken() error {
	nd.serial++
	ts := fmt.Sprintf("..token_%d", nd.serial)
	ca, err := cluster.SelfSignedCA()
	if err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(nd.sa, ts), 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"token": []byte(nd.token()), "ca.crt": ca} {
		if err := os.WriteFile(filepath.Join(nd.sa, ts, name), data, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(nd.sa, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(nd.sa, "..data"))
}

func (nd *fakeNode) token() string { return fmt.Sprintf("bench-token-%d", nd.serial) }

func (nd *fakeNode) startInstaller() (*exec.Cmd, *bytes.Buffer, error) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(filepath.Join(nd.src, "install-cni"),
		"--cni-bin-dir="+nd.bin, "--cni-net-dir="+nd.netd, "--run-dir="+nd.kc, "--service-account-dir="+nd.sa,
		"--health-addr=127.0.0.1:"+strconv.Itoa(ports[0]), "--metrics-addr=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--conflict-repairs=1000000", "--log-level=warn", "--pod-namespace=istio-cni", "--audit-action=off")
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the bench
	logs := &bytes.Buffer{}
	cmd.Stderr = logs
	return cmd, logs, cmd.Start()
}

// writePrimary rewrites the primary the way CNI installers do (temp file,
// rename), with a new serial so the change is visible in our copy.
func (nd *fakeNode) writePrimary() error {
	nd.serial++
	data := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"bridge","bridge":"cni0","serial":%d,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}`, nd.serial)
	tmp := filepath.Join(nd.netd, ".10-bridge.tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(nd.netd, "10-bridge.conflist"))
}

const ownedName = "02-istio-cni.conflist"

// ownedIs is the condition: the first config in the directory is our
// conflist and ok accepts its content.
func (nd *fakeNode) ownedIs(ok func(string) bool) func() bool {
	return func() bool {
		data, err := os.ReadFile(filepath.Join(nd.netd, ownedName))
		return err == nil && ok(string(data)) && nd.ownedFirst()
	}
}

// waitFor waits, on directory events, until cond holds.
func (nd *fakeNode) waitFor(cond func() bool, limit time.Duration) (time.Time, error) {
	deadline := time.After(limit)
	for {
		if cond() {
			return time.Now(), nil
		}
		select {
		case <-nd.w.Events:
		case err := <-nd.w.Errors:
			return time.Time{}, err
		case <-deadline:
			return time.Time{}, fmt.Errorf("not repaired after %s", limit)
		}
	}
}

const (
	foreignFirst = "foreign config sorts first"
	foreignName  = "00-foreign.conflist"
	primaryName  = "10-bridge.conflist"
)

// firstChains: the config a runtime would load (the first by name) chains
// istio-cni.
func (nd *fakeNode) firstChains() bool {
	entries, _ := os.ReadDir(nd.netd)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(nd.netd, e.Name()))
		return err == nil && strings.Contains(string(data), `"`+chain.PluginType+`"`)
	}
	return false
}

func (nd *fakeNode) ownedFirst() bool {
	entries, _ := os.ReadDir(nd.netd)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		return e.Name() == ownedName
	}
	return false
}

// repairs times n repairs, one every gap.
func (nd *fakeNode) repairs(kind string, gap time.Duration, n int) ([]time.Duration, error) {
	var ds []time.Duration
	next := time.Now()
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(next))
		next = next.Add(gap)
		start := time.Now()
		cond, err := nd.undo(kind)
		if err != nil {
			return nil, err
		}
		end, err := nd.waitFor(cond, 10*time.Second)
		if err != nil {
			return nil, err
		}
		ds = append(ds, end.Sub(start))
		if kind == foreignFirst {
			// The foreign config goes; ours takes its preferred name back
			// (untimed) before the next one comes.
			if err := os.Remove(filepath.Join(nd.netd, foreignName)); err != nil {
				return nil, err
			}
			if _, err := nd.waitFor(nd.ownedIs(func(s string) bool { return strings.Contains(s, `"`+chain.PluginType+`"`) }), 10*time.Second); err != nil {
				return nil, fmt.Errorf("after the foreign config went: %w", err)
			}
		}
	}
	return ds, nil
}

// undo makes one change of a kind and returns the condition of its repair.
func (nd *fakeNode) undo(kind string) (func() bool, error) {
	switch kind {
	case "primary rewritten":
		if err := nd.writePrimary(); err != nil {
			return nil, err
		}
		serial := fmt.Sprintf(`"serial":%d,`, nd.serial)
		return nd.ownedIs(func(s string) bool {
			s = strings.Join(strings.Fields(s), "")
			return strings.Contains(s, serial) && strings.Contains(s, `"`+chain.PluginType+`"`)
		}), nil
	case foreignFirst:
		// Another CNI's config appears sorting first (a copy of the
		// primary): the window in which a runtime reading the directory
		// would set up a sandbox without istio-cni lasts until ours sorts
		// first again.
		primary, err := os.ReadFile(filepath.Join(nd.netd, primaryName))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(nd.netd, foreignName), primary, 0o644); err != nil {
			return nil, err
		}
		return nd.firstChains, nil
	case "our conflist deleted":
		if err := os.Remove(filepath.Join(nd.netd, ownedName)); err != nil {
			return nil, err
		}
		return nd.ownedIs(func(s string) bool { return strings.Contains(s, `"`+chain.PluginType+`"`) }), nil
	}
	if err := nd.rotateToken(); err != nil {
		return nil, err
	}
	token := nd.token()
	return func() bool {
		kc, err := os.ReadFile(filepath.Join(nd.kc, install.KubeconfigName))
		return err == nil && strings.Contains(string(kc), token)
	}, nil
}

// procMemory reads VmRSS and VmHWM (KiB) of a process.
func procMemory(pid int) (rss, hwm int64) {
	m := procStatus(pid)
	return m["VmRSS:"], m["VmHWM:"]
}

// procStatus reads the KiB figures of /proc/PID/status, by their key
// ("VmRSS:", "RssAnon:", ...).
func procStatus(pid int) map[string]int64 {
	m := map[string]int64{}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			m[f[0]] = v
		}
	}
	return m
}
