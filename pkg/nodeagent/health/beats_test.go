package health

import (
	"strings"
	"testing"
	"time"
)

func TestBeats(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBeats(func() time.Time { return now })
	loop := b.Loop("watch loop", 30*time.Second)
	mint := b.Episodic("token minter", 30*time.Second)
	if err := b.Check(); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	now = now.Add(29 * time.Second)
	loop.Beat()
	now = now.Add(29 * time.Second)
	if err := b.Check(); err != nil {
		t.Fatalf("a beat within the bound, an idle minter: %v", err)
	}
	now = now.Add(2 * time.Second)
	if err := b.Check(); err == nil || !strings.Contains(err.Error(), "watch loop silent for 31s") {
		t.Fatalf("silent loop: %v", err)
	}
	loop.Beat()
	mint.Start()
	now = now.Add(31 * time.Second)
	loop.Beat()
	if err := b.Check(); err == nil || !strings.Contains(err.Error(), "token minter running for 31s") {
		t.Fatalf("hung mint: %v", err)
	}
	mint.Done()
	if err := b.Check(); err != nil {
		t.Fatalf("mint done: %v", err)
	}
	var none *Beat
	none.Beat() // no liveness configured: a no-op
}
