package nodeagent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

// TestAgentReportsItsMemoryLimit: the start line says the Go runtime's
// memory limit (GOMEMLIMIT, which the DaemonSet sets from the container's
// limits.memory), and the level it logs at; at debug, the settings it
// runs with follow.
func TestAgentReportsItsMemoryLimit(t *testing.T) {
	const limit = 128 << 20 // the DaemonSet's default limits.memory, 128Mi
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	n := newFakeNode(t)
	env := map[string]string{"LOG_LEVEL": "debug", "TAINT_KEY": "example.com/cni-not-ready"}
	cfg, err := ParseFlags(nil, func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return n.getenv(k)
	}, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	if _, err := New(cfg, nil, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: cfg.Install.LogLevel}))); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(logs.String(), "\n")
	var start struct {
		LogLevel         string `json:"log_level"`
		MemoryLimitBytes int64  `json:"memory_limit_bytes"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &start); err != nil || start.MemoryLimitBytes != limit || start.LogLevel != "DEBUG" {
		t.Errorf("start line %s (%v): want memory_limit_bytes %d and log_level DEBUG", lines[0], err, limit)
	}
	if len(lines) < 2 || !strings.Contains(lines[1], `"msg":"settings"`) || !strings.Contains(lines[1], `"taint_key":"example.com/cni-not-ready"`) {
		t.Errorf("the second line %q: want the settings at debug", lines[1])
	}
}
