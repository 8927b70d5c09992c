package install

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// node is a fake node's directories and a running installer.
type node struct {
	t                      *testing.T
	bin, netd, kc, sa, src string
	in                     *Installer
	cancel                 context.CancelFunc
	done                   chan error
	uninstall              atomic.Bool
	reinstalled            atomic.Bool  // what Deps.Reinstalled says
	reinstallChecks        atomic.Int64 // how often it was asked
	tokenSerial            int
	mint                   TokenMinter // nil: the installer's own token
	nodeUID                func(context.Context, bool) (string, error)
	notify                 Notifier
	beats                  *health.Beats
	now                    func() time.Time // the installer's clock; nil: time.Now
	tweak                  func(*Installer)
}

const bridgePrimary = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true}}]}`

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{t: t}
	n.bin, n.netd, n.kc, n.sa, n.src = filepath.Join(root, "bin"), filepath.Join(root, "net.d"),
		filepath.Join(root, "run-istio-cni"), filepath.Join(root, "sa"), filepath.Join(root, "image")
	for _, d := range []string{n.bin, n.netd, n.sa, n.src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(filepath.Join(n.src, PluginBinary), "#!/bin/sh\necho plugin v1\n", 0o755)
	n.write(filepath.Join(n.src, FullBinary), "#!/bin/sh\necho full plugin v1\n", 0o755)
	n.write(filepath.Join(n.src, LookupBinary), "#!/bin/sh\necho lookup v1\n", 0o755)
	n.rotateToken()
	return n
}

func (n *node) config() Config {
	return Config{
		Paths:              Paths{CNIBinDir: n.bin, CNINetDir: n.netd, RunDir: n.kc, NetnsDir: "/var/run/netns"},
		OwnFiles:           OwnFiles{PluginSource: n.src, OwnedConfigName: "02-istio-cni.conflist"},
		PluginSettings:     PluginSettings{ExcludeNamespaces: []string{"kube-system"}},
		HostKubeconfigPath: "/var/run/istio-cni/" + KubeconfigName, ServiceAccountDir: n.sa,
		APIHost: "10.96.0.1", APIPort: "443", LogLevel: slog.LevelInfo,
		Mode: Owned, Chained: true, PodNamespace: "istio-cni",
		// Tests undo our files quickly on purpose; only the fight tests
		// want the fight detected.
		FightRepairs: 1000, FightWindow: 2 * time.Second,
	}
}

// start runs an installer with cfg until the test ends.
func (n *node) start(cfg Config) {
	n.t.Helper()
	in := New(cfg, Deps{
		Log:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Metrics: NewMetrics(),
		Uninstall: func(context.Context) (bool, string, error) {
			return n.uninstall.Load(), "the test says so", nil
		},
		Reinstalled: func(context.Context) (bool, string) {
			n.reinstallChecks.Add(1)
			return n.reinstalled.Load(), "the test says so"
		},
		PluginToken: n.mint,
		NodeUID:     n.nodeUID,
		Notify:      n.notify,
		Liveness:    n.beats,
		Now:         n.now,
	})
	if n.tweak != nil {
		n.tweak(in)
	}
	n.in = in
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- in.Run(ctx) }()
	n.t.Cleanup(func() { _ = n.stop() })
}

// stop ends Run as SIGTERM does and returns its error.
func (n *node) stop() error {
	if n.cancel == nil {
		return nil
	}
	n.cancel()
	n.cancel = nil
	return <-n.done
}

func (n *node) write(path, content string, mode os.FileMode) {
	n.t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		n.t.Fatal(err)
	}
	// The running installer may have consumed the file already (inplace
	// mode converts a .conf into a .conflist): its mode is moot then.
	if err := os.Chmod(path, mode); err != nil && !os.IsNotExist(err) {
		n.t.Fatal(err)
	}
}

func (n *node) read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// rotateToken writes a new projected token the way the kubelet's atomic
// writer does: a new timestamped directory, then ..data swapped by rename.
func (n *node) rotateToken() string {
	n.t.Helper()
	n.tokenSerial++
	token := fmt.Sprintf("token-%d", n.tokenSerial)
	ts := fmt.Sprintf("..2026_11_21_%02d", n.tokenSerial)
	dir := filepath.Join(n.sa, ts)
	if err := os.Mkdir(dir, 0o755); err != nil {
		n.t.Fatal(err)
	}
	n.write(filepath.Join(dir, "token"), token, 0o644)
	n.write(filepath.Join(dir, "ca.crt"), string(testCA(n.t)), 0o644)
	tmp := filepath.Join(n.sa, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.sa, serviceAccountData)); err != nil {
		n.t.Fatal(err)
	}
	for _, f := range []string{"token", "ca.crt"} {
		_ = os.Symlink(filepath.Join(serviceAccountData, f), filepath.Join(n.sa, f))
	}
	return token
}

func testCA(t *testing.T) []byte {
	ca, err := cluster.SelfSignedCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// eventually waits for cond, failing the test with what it last saw.
func (n *node) eventually(what string, cond func() (bool, string)) {
	n.t.Helper()
	poll.Until(n.t, 10*time.Second, what, cond)
}

func (n *node) waitReady() {
	n.t.Helper()
	n.eventually("ready", func() (bool, string) { return n.in.Ready() })
}

// owned is our conflist's current name and content.
func (n *node) owned() (string, string) {
	name := n.in.Conflist()
	return name, n.read(filepath.Join(n.netd, name))
}

// fakeClock is a clock that moves only when the test moves it: what
// depends on it (a token's validity, a refusal's gap, a hold's lifetime)
// happens when the test says, not when a timer does.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func metric(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
