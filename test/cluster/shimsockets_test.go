package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The shims' sockets are the one thing a node keeps outside its
// directory: teardown removes those its task bundles name (containerd 2's
// bootstrap.json, or an older shim's address file), and no other.
func TestRemoveShimSockets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: writes in /run/containerd/s")
	}
	const sockDir = "/run/containerd/s"
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := func(name string) string {
		p := filepath.Join(sockDir, fmt.Sprintf("istio-cni-test-%d-%s", os.Getpid(), name))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
		return p
	}
	dir := t.TempDir()
	tasks := filepath.Join(filepath.Dir(containerdSocket(dir)), "state", "io.containerd.runtime.v2.task", "k8s.io")
	bundle := func(id, file, content string) {
		b := filepath.Join(tasks, id)
		if err := os.MkdirAll(b, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(b, file), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sandbox, legacy, other := sock("sandbox"), sock("legacy"), sock("other-node")
	bundle("sandbox", "bootstrap.json", `{"version":3,"address":"unix://`+sandbox+`","protocol":"ttrpc"}`)
	// A pod's app container shares its sandbox's shim.
	bundle("app", "bootstrap.json", `{"version":3,"address":"unix://`+sandbox+`","protocol":"ttrpc"}`)
	bundle("old", "address", "unix://"+legacy+"\n")

	if err := removeShimSockets(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sandbox, legacy} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: left (stat: %v)", p, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another node's socket was removed: %v", err)
	}
}
