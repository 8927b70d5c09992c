package xtables

import (
	"context"
	"strings"
	"testing"
)

// A namespace's owner decides how much iptables-save prints: past
// MaxOutput the output is refused with a clear error, never held.
func TestExecRunnerBoundsOutput(t *testing.T) {
	ctx := context.Background()
	out, err := ExecRunner{}.Run(ctx, nil, "head", "-c", "1000", "/dev/zero")
	if err != nil || len(out) != 1000 {
		t.Fatalf("1000 bytes: %d, %v", len(out), err)
	}
	out, err = ExecRunner{}.Run(ctx, nil, "head", "-c", "5000000", "/dev/zero")
	if err == nil || out != nil || !strings.Contains(err.Error(), "head: printed more than 4 MiB") {
		t.Errorf("5 MB: %d bytes, %v; want refused", len(out), err)
	}
	_, err = ExecRunner{}.Run(ctx, nil, "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x >&2; exit 3")
	if err == nil || len(err.Error()) > 5000 || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("a long error: %.200q (%d bytes), want it cut to a readable size", err, len(err.Error()))
	}
}
