package main

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitLimit bounds every wait on a condition in these tests.
const waitLimit = 10 * time.Second

// loopbacks lists the loopback hosts to test, skipping IPv6 if it is off.
func loopbacks(t *testing.T) []string {
	hosts := []string{"127.0.0.1"}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		hosts = append(hosts, "::1")
	} else {
		t.Logf("IPv6 loopback unavailable, testing IPv4 only: %v", err)
	}
	return hosts
}

// startInProcess runs a listening subcommand in-process and returns the
// listener name -> bound port map from its ready file. Cleanup stops it and
// requires exit code 0.
func startInProcess(t *testing.T, args ...string) map[string]string {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() { done <- run(ctx, append(args, "--ready-file", ready), &stderr, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("%v exited %d: %s", args, code, stderr.String())
		}
	})
	return waitReady(t, ready, done, &stderr)
}

// waitReady polls for the ready file until the deadline or until the process
// reports that it exited, and parses its "listener=<name> addr=<ip:port>" lines.
func waitReady[T any](t *testing.T, path string, exited <-chan T, stderr fmt.Stringer) map[string]string {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			ports := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var name, addr string
				if _, err := fmt.Sscanf(line, "listener=%s addr=%s", &name, &addr); err != nil {
					t.Fatalf("ready file line %q: %v", line, err)
				}
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					t.Fatalf("ready file line %q: %v", line, err)
				}
				ports[name] = port
			}
			return ports
		}
		select {
		case <-exited:
			t.Fatalf("exited before writing %s: %s", path, stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file %s after %s: %s", path, waitLimit, stderr)
		}
	}
}

// dial runs the client subcommand in-process and returns what it printed.
func dial(t *testing.T, host, port string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"client", "--addr", net.JoinHostPort(host, port)}, &stdout, &stderr); code != 0 {
		t.Fatalf("client %s:%s exited %d: %s", host, port, code, stderr.String())
	}
	return stdout.String()
}

func TestServerReplies(t *testing.T) {
	ports := startInProcess(t, "server", "--port", "0", "--name", "web")
	for _, host := range loopbacks(t) {
		t.Run(host, func(t *testing.T) {
			local := net.JoinHostPort(host, ports["server"])
			want := regexp.MustCompile(`^server name=web local=` + regexp.QuoteMeta(local) +
				` peer=` + regexp.QuoteMeta(net.JoinHostPort(host, "")) + `\d+\n$`)
			if got := dial(t, host, ports["server"]); !want.MatchString(got) {
				t.Errorf("got %q, want match for %s", got, want)
			}
		})
	}
}

// TestProxyNotRedirected dials the proxy directly. Without a conntrack entry
// SO_ORIGINAL_DST fails (orig=none); with one (nat rules exist in this netns)
// the kernel reports the unchanged destination, i.e. the listener itself.
func TestProxyNotRedirected(t *testing.T) {
	ports := startInProcess(t, "proxy", "--outbound-port", "0", "--inbound-port", "0")
	for _, host := range loopbacks(t) {
		for _, listener := range []string{"outbound", "inbound"} {
			t.Run(host+"/"+listener, func(t *testing.T) {
				local := net.JoinHostPort(host, ports[listener])
				want := regexp.MustCompile(fmt.Sprintf(`^proxy listener=%s orig=(none|%s) peer=%s\d+ uid=%d\n$`,
					listener, regexp.QuoteMeta(local), regexp.QuoteMeta(net.JoinHostPort(host, "")), os.Getuid()))
				if got := dial(t, host, ports[listener]); !want.MatchString(got) {
					t.Errorf("got %q, want match for %s", got, want)
				}
			})
		}
	}
}

func TestUsageAndErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage:"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"client"}, 2, "--addr is required"},
		{[]string{"client", "--addr", closedAddr}, 1, "connection refused"},
		{[]string{"client", "--addr", closedAddr, "--timeout", "0s"}, 2, "--timeout must be positive"},
		{[]string{"server"}, 2, "--port is required"},
		{[]string{"server", "--port", "70000"}, 2, "want a port number 0-65535"},
		{[]string{"proxy", "extra"}, 2, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.msg) || stdout.Len() != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and stderr containing %q",
					code, stdout.String(), stderr.String(), tt.code, tt.msg)
			}
		})
	}
}

// binDir holds the binary built by buildBinary; TestMain creates and removes it.
var binDir string

// buildBinary builds the static binary at most once per test run.
var buildBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "testproxy")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "testproxy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not in PATH")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startProcess starts cmd (which must be given --ready-file ready), waits for
// the ready file and returns the ports it lists plus a stop function that
// sends SIGTERM to this one process and returns its exit error. Cleanup kills
// it by PID if the test did not stop it.
func startProcess(t *testing.T, cmd *exec.Cmd, ready string) (map[string]string, func() error) {
	t.Helper()
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() error {
		select {
		case <-exited:
			return waitErr
		default:
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		select {
		case <-exited:
			return waitErr
		case <-time.After(waitLimit):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("pid %d ignored SIGTERM for %s", cmd.Process.Pid, waitLimit)
		}
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // no-op error if already gone
		<-exited
	})
	return waitReady(t, ready, exited, &stderr), stop
}

// TestBinary checks that the binary links statically and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	bin := testBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not statically linked", bin)
		}
	}

	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(bin, "proxy", "--outbound-port", "0", "--inbound-port", "0", "--ready-file", ready)
	ports, stop := startProcess(t, cmd, ready)
	if got := dial(t, "127.0.0.1", ports["inbound"]); !strings.HasPrefix(got, "proxy listener=inbound ") {
		t.Errorf("got %q from the inbound listener", got)
	}
	if err := stop(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}

// TestRedirectInNetns runs the built proxy in a fresh netns. Before any nat
// rule exists there is no conntrack entry, so SO_ORIGINAL_DST fails
// (orig=none). After REDIRECT rules for port 9999 are added, a connection to
// 9999 lands on the outbound listener with orig=<host>:9999, for IPv4
// (v4-mapped on the dual-stack socket) and IPv6; a direct connection is now
// tracked too and reports the listener's own address.
func TestRedirectInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, tool := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	bin := testBinary(t)
	ns := fmt.Sprintf("testproxy-%d", os.Getpid())
	mustRun(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", ns, err, out)
		}
	})
	inNS := func(args ...string) []string { return append([]string{"netns", "exec", ns}, args...) }
	mustRun(t, "ip", inNS("ip", "link", "set", "lo", "up")...)

	ready := filepath.Join(t.TempDir(), "ready")
	// ip netns exec execs the binary in place, so the PID is the proxy's.
	_, stop := startProcess(t, exec.Command("ip", inNS(bin, "proxy", "--ready-file", ready)...), ready)

	check := func(t *testing.T, host, port, listener, orig string) {
		t.Helper()
		got := mustRun(t, "ip", inNS(bin, "client", "--addr", net.JoinHostPort(host, port))...)
		want := regexp.MustCompile(fmt.Sprintf(`^proxy listener=%s orig=%s peer=%s\d+ uid=0\n$`,
			listener, regexp.QuoteMeta(orig), regexp.QuoteMeta(net.JoinHostPort(host, ""))))
		if !want.MatchString(got) {
			t.Errorf("dial %s:%s: got %q, want match for %s", host, port, got, want)
		}
	}
	hosts := []string{"127.0.0.1", "::1"}
	for _, host := range hosts {
		t.Run("untracked/"+host, func(t *testing.T) { check(t, host, "15001", "outbound", "none") })
	}

	for _, ipt := range []string{"iptables", "ip6tables"} {
		mustRun(t, "ip", inNS(ipt, "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "9999",
			"-j", "REDIRECT", "--to-ports", "15001")...)
	}
	for _, host := range hosts {
		t.Run("redirected/"+host, func(t *testing.T) {
			check(t, host, "9999", "outbound", net.JoinHostPort(host, "9999"))
		})
		t.Run("direct/"+host, func(t *testing.T) {
			check(t, host, "15006", "inbound", net.JoinHostPort(host, "15006"))
		})
	}
	if err := stop(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}

// TestForwardInNetns: with --forward, a connection REDIRECTed to the
// outbound listener gets the proxy's line, then what its original
// destination answered the proxy's own dial (which the rule, matching the
// app's uid only, lets out), as a sidecar passes traffic on to the next.
func TestForwardInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	for _, tool := range []string{"ip", "iptables", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	bin := testBinary(t)
	ns := fmt.Sprintf("testproxy-fwd-%d", os.Getpid())
	mustRun(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", ns, err, out)
		}
	})
	inNS := func(args ...string) []string { return append([]string{"netns", "exec", ns}, args...) }
	mustRun(t, "ip", inNS("ip", "link", "set", "lo", "up")...)
	dir := t.TempDir()
	_, stopProxy := startProcess(t, exec.Command("ip", inNS(bin, "proxy", "--forward", "--ready-file", filepath.Join(dir, "proxy"))...), filepath.Join(dir, "proxy"))
	_, stopServer := startProcess(t, exec.Command("ip", inNS(bin, "server", "--port", "9999", "--name", "up", "--ready-file", filepath.Join(dir, "server"))...), filepath.Join(dir, "server"))
	const app = "1000"
	mustRun(t, "ip", inNS("iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "9999",
		"-m", "owner", "--uid-owner", app, "-j", "REDIRECT", "--to-ports", "15001")...)
	got := mustRun(t, "ip", inNS("setpriv", "--reuid", app, "--regid", app, "--clear-groups", bin, "client", "--addr", "127.0.0.1:9999")...)
	want := regexp.MustCompile(`^proxy listener=outbound orig=127\.0\.0\.1:9999 peer=127\.0\.0\.1:\d+ uid=0\nserver name=up local=127\.0\.0\.1:9999 peer=127\.0\.0\.1:\d+\n$`)
	if !want.MatchString(got) {
		t.Errorf("through the forwarding proxy: got %q, want match for %s", got, want)
	}
	// Without a destination to reach, the proxy says so after its line.
	stopServerErr := stopServer()
	got = mustRun(t, "ip", inNS("setpriv", "--reuid", app, "--regid", app, "--clear-groups", bin, "client", "--addr", "127.0.0.1:9999")...)
	if !strings.HasPrefix(got, "proxy listener=outbound orig=127.0.0.1:9999 ") || !strings.Contains(got, "\nerror: forward to 127.0.0.1:9999: ") {
		t.Errorf("forwarding to nothing: got %q", got)
	}
	for _, err := range []error{stopServerErr, stopProxy()} {
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0", err)
		}
	}
}

// mustRun runs a command and returns its stdout, failing the test on error.
func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// syncBuffer is a bytes.Buffer safe to write from a running command or
// goroutine while the test reads it for an error message.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestClientEvery: with --every the client keeps dialing, one reply per
// attempt, reports a failed attempt as a line and goes on, and exits 0 when
// stopped.
func TestClientEvery(t *testing.T) {
	ports := startInProcess(t, "server", "--port", "0", "--name", "web")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"client", "--addr", "127.0.0.1:" + ports["server"], "--every", "10ms"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(waitLimit)
	for strings.Count(stdout.String(), "server name=web") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 3 replies after %s: %q %q", waitLimit, stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d, want 0 when stopped: %s", code, stderr.String())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	ctx, cancel = context.WithCancel(context.Background())
	var out syncBuffer
	go func() { done <- run(ctx, []string{"client", "--addr", closed, "--every", "10ms"}, &out, &stderr) }()
	for strings.Count(out.String(), "error: ") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("failed attempts not reported: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	var neg bytes.Buffer
	if code := run(context.Background(), []string{"client", "--addr", closed, "--every", "-1s"}, &neg, &neg); code != 2 {
		t.Errorf("--every -1s: exit %d, want 2: %s", code, neg.String())
	}
}

// TestUDP: the udp subcommand answers a datagram; client --udp prints it.
func TestUDP(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"udp", "--port", strconv.Itoa(port), "--name", "dns"}, &stderr, &stderr)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("udp exited %d: %s", code, stderr.String())
		}
	}()
	deadline := time.Now().Add(waitLimit)
	for {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"client", "--udp", "--addr", "127.0.0.1:" + strconv.Itoa(port), "--timeout", "200ms"}, &out, &errOut)
		if code == 0 {
			if !strings.HasPrefix(out.String(), "udp name=dns peer=127.0.0.1:") {
				t.Errorf("reply %q", out.String())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no UDP reply after %s: %s", waitLimit, errOut.String())
		}
	}
}

// TestProxyHealth: with --health-addr, the proxy answers Istio's injected
// probes (GET /healthz/ready) there, and nothing else.
func TestProxyHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	startInProcess(t, "proxy", "--outbound-port", "0", "--inbound-port", "0", "--health-addr", addr)
	for path, want := range map[string]int{"/healthz/ready": http.StatusOK, "/stats": http.StatusNotFound} {
		resp, err := http.Get("http://" + addr + path) // #nosec G107 -- loopback
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
