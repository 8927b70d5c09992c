package plugin

import (
	"io"
	"log/slog"
	"os"
	"syscall"

	"istio-cni.local/istio-cni/pkg/version"
)

// MaxLogFileSize bounds log_file: past it, the next invocation moves the
// file to log_file.1 (replacing the one before) and starts a new one, so
// the node holds at most twice this much.
const MaxLogFileSize = 1 << 20

// newLogger logs JSON lines to stderr (never stdout, which carries the CNI
// result) and, if configured, appends them to a file. A nil conf (it did not
// parse) logs at info to stderr. Every line names the plugin and its build's
// version (pkg/version; the agent's, when the agent runs the ADD). The
// returned func closes the file.
func newLogger(conf *Config, stderr io.Writer) (*slog.Logger, func()) {
	w, closeFn := stderr, func() {}
	names := []any{"plugin", "istio-cni", "version", version.Get()}
	level := slog.LevelInfo
	if conf != nil {
		level = conf.parsed.LogLevel
	}
	if conf != nil && conf.LogFile != "" {
		f, err := openLogFile(conf.LogFile, MaxLogFileSize)
		if err == nil {
			w, closeFn = io.MultiWriter(stderr, f), func() { _ = f.Close() }
		} else {
			defer slog.New(slog.NewJSONHandler(stderr, nil)).With(names...).Warn("cannot open log_file; logging to stderr only", "log_file", conf.LogFile, "error", err)
		}
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With(names...), closeFn
}

// openLogFile opens path to append, first rotating it to path.1 when it
// has grown past limit. Invocations run concurrently: the rotation holds
// the file's lock and renames only if path still names the file it
// measured, so two invocations never rotate twice and drop a log; one
// that finds the lock taken appends without rotating, to the file it
// opened (by then perhaps path.1).
func openLogFile(path string, limit int64) (*os.File, error) {
	// O_NOFOLLOW: the plugin runs as root; a link planted at log_file
	// must not make it append to whatever file the link names.
	open := func() (*os.File, error) {
		return os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600) // #nosec G304 -- the configured log_file
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil || st.Size() <= limit {
		return f, nil //nolint:nilerr // a file that cannot be measured is still written
	}
	// Non-blocking: an ADD never waits on the lock; whoever holds it is
	// rotating, and this invocation appends to the file it opened.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil { // #nosec G115 -- a descriptor
		return f, nil //nolint:nilerr // unrotated is better than unlogged
	}
	if cur, err := os.Lstat(path); err == nil && os.SameFile(cur, st) {
		_ = os.Rename(path, path+".1")
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) // #nosec G115 -- a descriptor
	_ = f.Close()
	return open()
}
