package install

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/health"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
	"istio-cni.local/istio-cni/pkg/pluginconf"
)

// UninstallCheck tells, at shutdown, whether the agent stops because the
// product is being removed (remove everything) or for any other reason
// (rolling update, restart, node drain or reboot: leave everything so pods
// keep starting while the agent is away). pkg/nodeagent/lifecycle implements it.
type UninstallCheck func(ctx context.Context) (uninstall bool, why string, err error)

// Deps are what the installer is given besides its configuration; every
// one may be nil.
type Deps struct {
	Log     *slog.Logger
	Metrics *Metrics
	// Uninstall tells uninstall from restart at shutdown; nil: always
	// restart.
	Uninstall UninstallCheck
	// Reinstalled tells an agent that uninstalled while running (its
	// DaemonSet and ServiceAccount went) that they are back and the API
	// accepts it again: it then exits, so kubelet restarts it to install
	// (a new install adopts orphaned pods with the same template and does
	// not replace them). nil: it idles until stopped.
	Reinstalled func(ctx context.Context) (bool, string)
	// PluginToken mints the plugin's tokens; nil: the plugin's kubeconfig
	// carries the installer's own service-account token.
	PluginToken TokenMinter
	// NodeUID reads the UID of the node the plugin's tokens are bound
	// to, from the API server's cache or, fresh, from its storage; nil:
	// never checked. A node deleted and registered again (a new UID) has
	// revoked them: the next check mints a new one.
	NodeUID func(ctx context.Context, fresh bool) (string, error)
	// Notify hears of a writer that keeps undoing our files, and of
	// another installer managing the node (Events on the Node); the log
	// and the metrics hear of it anyway.
	Notify Notifier
	// Liveness gets the watch loop's and the minter's progress (/healthz).
	Liveness *health.Beats
	Now      func() time.Time
}

// Installer keeps the plugin installed on the node. Only Run's loop
// touches its state, except readiness, which others read, and the plugin's
// token keeper (tokens), which runs on a goroutine of its own and sends
// the loop its news.
type Installer struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	deps    Deps
	now     func() time.Time

	ready  *readiness // what /readyz says, read by other goroutines
	fights *fights    // another writer undoing us, and the repairs' pace
	// tokens keeps the plugin's minted token; nil: the kubeconfig carries
	// the installer's own.
	tokens *pluginToken
	token  tokenState   // the plugin's token, as tokens last told
	files  fileState    // what the loop wrote and found
	alive  *health.Beat // the watch loop's progress
	// removeNow carries UninstallNow's reason to the loop.
	removeNow chan string
	// reinstallEvery: how often an agent that uninstalled while running
	// asks whether istio-cni is back.
	reinstallEvery time.Duration
	// refusedHold: the API refused the agent's credentials at start;
	// nothing is installed until a mint succeeds (removed.go).
	refusedHold bool
	// holdCleared: a hold outlasted the plugin's token lifetime and the
	// files an earlier run left were removed.
	holdCleared bool

	unwatched []string // watched directories not armed yet
}

// fileState is what the loop knows of the node's files.
type fileState struct {
	owned           string           // our conflist's current name (inplace: the primary's)
	primary         string           // the primary config's name
	lastConflist    []byte           // what we last wrote there
	lastKubeconfig  []byte           // what we last wrote there
	binaryInstalled bool             // the binary was copied once by this process
	problems        map[string]error // each file's last failure, for readiness
	other           string           // a config where another installer's entry is, or ""
}

// aliveBound is how long the watch loop may go without a turn before
// /healthz fails; it ticks every aliveTick even when nothing happens. A
// reconcile is a few file operations: only a loop stuck in a system call
// (a hung mount) goes silent this long.
const (
	aliveTick  = 5 * time.Second
	aliveBound = 30 * time.Second
)

// New returns an installer that has not touched anything yet.
func New(cfg Config, deps Deps) *Installer {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Metrics == nil {
		deps.Metrics = NewMetrics()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	in := &Installer{cfg: cfg, log: deps.Log, metrics: deps.Metrics, deps: deps, now: deps.Now,
		ready:          newReadiness(deps.Log, deps.Metrics, deps.Now),
		fights:         newFights(cfg.FightRepairs, cfg.FightWindow),
		removeNow:      make(chan string, 1),
		reinstallEvery: reinstallCheck,
	}
	if deps.PluginToken != nil {
		in.tokens = newPluginToken(deps, cfg.PluginTokenTTL)
	}
	if deps.Liveness != nil {
		in.alive = deps.Liveness.Loop("watch loop", aliveBound)
	}
	return in
}

// Ready reports readiness and, when not ready, why.
func (in *Installer) Ready() (bool, string) { return in.ready.get() }

// ReadyChanged is signalled after each change of readiness.
func (in *Installer) ReadyChanged() <-chan struct{} { return in.ready.changed }

// Conflist is the chained conflist's name as of the last readiness check.
func (in *Installer) Conflist() string { return in.ready.conflistName() }

// inDir runs f on a directory, created if absent and opened afresh: a
// directory that was removed and recreated on the host is the new one.
func inDir[T any](path string, mode os.FileMode, f func(*hostfs.Dir) (T, error)) (T, error) {
	var zero T
	if err := os.MkdirAll(path, mode); err != nil {
		return zero, fmt.Errorf("creating %s: %w", path, err)
	}
	if mode&0o077 == 0 {
		if err := keepPrivate(path); err != nil {
			return zero, err
		}
	}
	d, err := hostfs.OpenDir(path)
	if err != nil {
		return zero, err
	}
	defer func() { _ = d.Close() }()
	return f(d)
}

// keepPrivate takes group and other access off a directory only root may
// enter (the run directory: the plugin's token, the reports socket, the
// records). The DaemonSet's hostPath creates it 0755, and an existing one
// keeps whatever mode it had.
func keepPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(path, perm&^0o077); err != nil {
			return fmt.Errorf("making %s private (mode %#o): %w", path, perm, err)
		}
	}
	return nil
}

// entry is the plugin's conflist entry.
func (in *Installer) entry() pluginconf.Entry {
	run := in.cfg.HostRunDir()
	return pluginconf.Entry{
		Kubeconfig:        in.cfg.HostKubeconfigPath,
		ExcludeNamespaces: in.cfg.ExcludeNamespaces,
		LogLevel:          levelName(in.cfg.LogLevel),
		ReportsSocket:     filepath.Join(run, ReportsSocket),
		PodSocket:         filepath.Join(run, PodsSocket),
		RecordsDir:        filepath.Join(run, RecordsDirName),
		CacheDir:          filepath.Join(run, CacheDirName),
		IPv6Redirect:      string(in.cfg.IPv6Redirect),
		NativeNftables:    in.cfg.NativeNftables,
		LogFile:           filepath.Join(run, LogDirName, PluginLogName),
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
