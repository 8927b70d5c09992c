package install

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestStopsFightingAnotherWriter: a writer that deletes our conflist as soon
// as it appears makes the installer stop, stay not ready and say why; once
// the writer stops, it repairs again.
func TestStopsFightingAnotherWriter(t *testing.T) {
	n := newNode(t)
	n.write(filepath.Join(n.netd, "10-bridge.conflist"), bridgePrimary, 0o644)
	cfg := n.config()
	cfg.ConflictRepairs, cfg.ConflictWindow = 4, time.Second
	n.start(cfg)
	n.waitReady()
	owned := filepath.Join(n.netd, "02-istio-cni.conflist")
	var fighting atomic.Bool
	fighting.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for fighting.Load() {
			if _, err := os.Stat(owned); err == nil {
				_ = os.Remove(owned)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	n.eventually("conflict reported", func() (bool, string) {
		ok, why := n.in.Ready()
		return !ok && strings.Contains(why, "conflict") && strings.Contains(why, "02-istio-cni.conflist"), why
	})
	if metric(n.in.metrics.Conflict) != 1 {
		t.Error("conflict gauge not 1")
	}
	fighting.Store(false)
	<-done
	n.waitReady()
	if metric(n.in.metrics.Conflict) != 0 {
		t.Error("conflict gauge still 1 after the writer stopped")
	}
}
