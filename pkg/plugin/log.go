package plugin

import (
	"io"
	"log/slog"
	"os"
	"syscall"
)

// newLogger logs JSON lines to stderr (never stdout, which carries the CNI
// result) and, if configured, appends them to a file. A nil conf (it did not
// parse) logs at info to stderr. The returned func closes the file.
func newLogger(conf *Config, stderr io.Writer) (*slog.Logger, func()) {
	w, closeFn := stderr, func() {}
	level := slog.LevelInfo
	if conf != nil {
		level = conf.parsed.LogLevel
	}
	if conf != nil && conf.LogFile != "" {
		// O_NOFOLLOW: the plugin runs as root; a link planted at log_file
		// must not make it append to whatever file the link names.
		f, err := os.OpenFile(conf.LogFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			w, closeFn = io.MultiWriter(stderr, f), func() { _ = f.Close() }
		} else {
			defer slog.New(slog.NewJSONHandler(stderr, nil)).Warn("cannot open log_file; logging to stderr only", "log_file", conf.LogFile, "error", err)
		}
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("plugin", "istio-cni"), closeFn
}
