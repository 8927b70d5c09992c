package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// containerd 2.3's RunPodSandbox lines, as its log writes them: the
// metadata in protobuf's text form, without a zero attempt; its fields
// are one space apart, or two in some builds (protobuf-go's choice per
// binary: burst-2's lines).
const containerdLog = `time="2026-11-25T07:00:00.000000000Z" level=info msg="RunPodSandbox for name:\"burst-1\" uid:\"7d2c\" namespace:\"burst\""
time="2026-11-25T07:00:00.100000000Z" level=info msg="RunPodSandbox for name:\"burst-2\"  uid:\"8e3d\"  namespace:\"burst\""
time="2026-11-25T07:00:00.200000000Z" level=info msg="RunPodSandbox for name:\"other\" uid:\"9f4e\" namespace:\"default\" attempt:1"
time="2026-11-25T07:00:00.250000000Z" level=info msg="RunPodSandbox for name:\"other\" uid:\"9f4e\" namespace:\"default\" attempt:1 returns sandbox id \"aa\""
time="2026-11-25T07:00:00.350000000Z" level=info msg="RunPodSandbox for name:\"burst-1\" uid:\"7d2c\" namespace:\"burst\" returns sandbox id \"bb\""
time="2026-11-25T07:00:01.000000000Z" level=error msg="RunPodSandbox for name:\"burst-2\"  uid:\"8e3d\"  namespace:\"burst\" failed, error" error="failed to setup network for sandbox"
time="2026-11-25T07:00:01.000000000Z" level=info msg="StopPodSandbox for \"bb\""
`

func TestRunPodSandboxTimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "containerd.log")
	if err := os.WriteFile(path, []byte(containerdLog), 0o600); err != nil {
		t.Fatal(err)
	}
	took, failed, err := runPodSandboxTimes(path, "burst")
	if err != nil {
		t.Fatal(err)
	}
	if failed != 1 {
		t.Errorf("failed = %d, want 1 (burst-2)", failed)
	}
	if len(took) != 1 || took["burst-1"] != 350*time.Millisecond {
		t.Errorf("took = %v, want burst-1: 350ms and nothing else", took)
	}
}
