package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RegistryDir lists every test node started on this machine, one file per
// bridge, so that what a killed run left (its containers outlive it, and
// so do its mounts, bridge and cgroups) is found and torn down by the next
// run before it starts, instead of loading the machine for whatever runs
// next. A variable only so the harness's own tests can use another.
var RegistryDir = "/run/istio-cni-test-nodes"

// registration is one node's registry entry.
type registration struct {
	Dir    string `json:"dir"`
	Bridge string `json:"bridge"`
	// Owner is the process that started the node: while it lives the
	// node is in use. A detached node (the demo's) outlives its owner by
	// design and is only taken down by its own -down, or by a new node
	// that needs its bridge.
	OwnerPID   int    `json:"ownerPid"`
	OwnerStart uint64 `json:"ownerStart"`
	Detached   bool   `json:"detached"`
}

func registryFile(bridge string) string { return filepath.Join(RegistryDir, bridge+".json") }

// register records the node about to start in dir; it fails when a live
// node holds the bridge.
func register(dir, bridge string, detached bool) error {
	if err := os.MkdirAll(RegistryDir, 0o700); err != nil {
		return err
	}
	if r, ok := readRegistration(registryFile(bridge)); ok && r.Dir != dir {
		if r.inUse() {
			return fmt.Errorf("bridge %s is in use by a node in %s (owner pid %d)", bridge, r.Dir, r.OwnerPID)
		}
		if err := r.tearDown(); err != nil {
			return fmt.Errorf("the node left in %s on bridge %s: %w", r.Dir, bridge, err)
		}
	}
	start, err := startTime(os.Getpid())
	if err != nil {
		return err
	}
	data, err := json.Marshal(registration{Dir: dir, Bridge: bridge, OwnerPID: os.Getpid(), OwnerStart: start, Detached: detached})
	if err != nil {
		return err
	}
	return os.WriteFile(registryFile(bridge), data, 0o600)
}

// unregister drops the node's entry once it is down.
func unregister(bridge string) { _ = os.Remove(registryFile(bridge)) }

func readRegistration(path string) (registration, bool) {
	var r registration
	data, err := os.ReadFile(path) // #nosec G304 -- the harness's own registry
	if err != nil || json.Unmarshal(data, &r) != nil || r.Dir == "" || r.Bridge == "" {
		return r, false
	}
	return r, true
}

// inUse: the owner still runs, or, for a detached node, one of its
// recorded processes does.
func (r registration) inUse() bool {
	if !r.Detached {
		start, err := startTime(r.OwnerPID)
		return err == nil && start == r.OwnerStart
	}
	procs, _ := readRecorded(r.Dir)
	for _, p := range procs {
		if p.alive() {
			return true
		}
	}
	return false
}

// tearDown ends what the dead node left and removes its directory and
// entry.
func (r registration) tearDown() error {
	err := abortNode(r.Dir, r.Bridge, nil)
	if err == nil {
		err = os.RemoveAll(r.Dir)
	}
	if err == nil {
		unregister(r.Bridge)
	}
	return err
}

// SweepStale tears down every node whose run was killed (its owner is gone
// and it was not detached), as the first step of every node start; it
// returns the directories it cleaned.
func SweepStale() ([]string, error) {
	entries, err := os.ReadDir(RegistryDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cleaned []string
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, ok := readRegistration(filepath.Join(RegistryDir, e.Name()))
		if !ok || r.Detached || r.inUse() {
			continue
		}
		if err := r.tearDown(); err != nil {
			errs = append(errs, fmt.Errorf("the node left in %s: %w", r.Dir, err))
			continue
		}
		cleaned = append(cleaned, r.Dir)
	}
	return cleaned, errors.Join(errs...)
}
