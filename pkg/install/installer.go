package install

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/fsutil"
)

// UninstallCheck tells, at shutdown, whether the agent stops because its
// DaemonSet is being deleted (uninstall: remove everything) or for any other
// reason (rolling update, restart, node drain or reboot: leave everything so
// pods keep starting while the agent is away).
type UninstallCheck func(ctx context.Context) (bool, error)

// Installer keeps the plugin installed on the node.
type Installer struct {
	cfg       Config
	log       *slog.Logger
	metrics   *Metrics
	uninstall UninstallCheck
	mint      TokenMinter // nil: the plugin uses the installer's own token
	now       func() time.Time

	mu       sync.Mutex // guards ready, why, conflist and addrs
	ready    bool
	why      string
	conflist string

	addrs []string // the health and metrics listeners' addresses (under mu)

	readyChanged chan struct{} // signalled after each readiness change

	// Loop state.
	unwatched       []string         // watched directories not armed yet
	owned           string           // our conflist's current name (inplace: the primary's)
	primary         string           // the primary config's name
	lastConflist    []byte           // what we last wrote there
	lastKubeconfig  []byte           // what we last wrote there
	pluginTok       pluginTokenState // the plugin's minted token
	minted          chan mintResult  // background mints report here
	mintTimeout     time.Duration    // bounds one mint
	mintRetry       time.Duration    // after a failed mint
	binaryInstalled bool             // the binary was copied once by this process
	repairs         []time.Time      // recent repairs forced on our files, for conflict detection
	problems        map[string]error // each file's last failure, for readiness
	conflict        string           // non-empty while we have stopped fighting: what we saw
}

// API is what the installer asks the API server; either may be nil.
type API struct {
	// Uninstall tells uninstall from restart at shutdown; nil: always
	// restart.
	Uninstall UninstallCheck
	// PluginToken mints the plugin's tokens; nil: the plugin's kubeconfig
	// carries the installer's own service-account token.
	PluginToken TokenMinter
}

// New returns an installer that has not touched anything yet.
func New(cfg Config, log *slog.Logger, m *Metrics, api API) *Installer {
	return &Installer{cfg: cfg, log: log, metrics: m, uninstall: api.Uninstall, mint: api.PluginToken,
		minted: make(chan mintResult, 1), mintTimeout: defaultMintTimeout, mintRetry: defaultMintRetry,
		now: time.Now, why: "starting", readyChanged: make(chan struct{}, 1)}
}

// inDir runs f on a directory, created if absent and opened afresh: a
// directory that was removed and recreated on the host is the new one.
func inDir[T any](path string, mode os.FileMode, f func(*fsutil.Dir) (T, error)) (T, error) {
	var zero T
	if err := os.MkdirAll(path, mode); err != nil {
		return zero, fmt.Errorf("creating %s: %w", path, err)
	}
	d, err := fsutil.OpenDir(path)
	if err != nil {
		return zero, err
	}
	defer func() { _ = d.Close() }()
	return f(d)
}

// Ready reports readiness and, when not ready, why.
func (in *Installer) Ready() (bool, string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ready, in.why
}

// ReadyChanged is signalled after each change of readiness.
func (in *Installer) ReadyChanged() <-chan struct{} { return in.readyChanged }

// Conflist is the chained conflist's name as of the last readiness check.
func (in *Installer) Conflist() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.conflist
}

func (in *Installer) setReady(ok bool, why string) {
	in.mu.Lock()
	changed := in.ready != ok || in.why != why
	in.ready, in.why, in.conflist = ok, why, in.owned
	in.mu.Unlock()
	if ok {
		in.metrics.Ready.Set(1)
	} else {
		in.metrics.Ready.Set(0)
	}
	if changed {
		select {
		case in.readyChanged <- struct{}{}:
		default: // one pending signal is enough: readers call Ready
		}
		if ok {
			in.log.Info("ready", "conflist", in.owned, "primary", in.primary)
		} else {
			in.log.Warn("not ready", "reason", why)
		}
	}
}

// entry is the plugin's conflist entry.
func (in *Installer) entry() chain.Entry {
	return chain.Entry{
		Kubeconfig:        in.cfg.HostKubeconfigPath,
		ExcludeNamespaces: in.cfg.ExcludeNamespaces,
		AgentNamespace:    in.cfg.PodNamespace,
		LogLevel:          levelName(in.cfg.LogLevel),
		AgentSocket:       filepath.Join(filepath.Dir(in.cfg.HostKubeconfigPath), EventsSocket),
	}
}

func levelName(l slog.Level) string {
	switch {
	case l <= slog.LevelDebug:
		return "debug"
	case l <= slog.LevelInfo:
		return "info"
	case l <= slog.LevelWarn:
		return "warn"
	}
	return "error"
}
