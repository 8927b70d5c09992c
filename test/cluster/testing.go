package cluster

import (
	"os"
	"testing"
)

// StartForTest starts an API server under t.TempDir() and stops it in
// t.Cleanup. It skips the test unless running as root, and fails it (never
// skips) when a binary is missing, so CI cannot pass by not testing. If the
// test failed, the tails of the logs are logged before the directory goes.
func StartForTest(t testing.TB) *APIServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cluster: needs root")
	}
	a, err := StartAPIServer(t.Context(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Errorf("stopping API server: %v", err)
		}
		if t.Failed() {
			for _, p := range []*proc{a.apiProc(), a.etcd} {
				t.Logf("--- tail of %s ---\n%s", p.log, logTail(p.log, 30))
			}
		}
	})
	return a
}
