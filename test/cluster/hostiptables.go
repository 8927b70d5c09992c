package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// kubeletChains are the host chains kubelet creates: its canaries and
// hint (to detect iptables flushes and the backend in use) and the
// localnet firewall. They are removed when the last test node stops, so a
// test run leaves the host's iptables as it found them.
var kubeletChains = []struct{ table, chain string }{
	{"filter", "KUBE-FIREWALL"},
	{"filter", "KUBE-KUBELET-CANARY"},
	{"nat", "KUBE-KUBELET-CANARY"},
	{"mangle", "KUBE-KUBELET-CANARY"},
	{"mangle", "KUBE-IPTABLES-HINT"},
}

// removeKubeletChains deletes kubeletChains and the jumps into them, in
// both families, unless another kubelet still runs on this machine.
// Errors are ignored: a chain that is not there is the goal.
func removeKubeletChains() {
	if kubeletRunning() {
		return
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, hook := range []string{"INPUT", "OUTPUT"} {
			_ = exec.Command(cmd, "-w", "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL").Run() // #nosec G204 -- fixed arguments
		}
		for _, c := range kubeletChains {
			_ = exec.Command(cmd, "-w", "-t", c.table, "-F", c.chain).Run() // #nosec G204 -- fixed arguments
			_ = exec.Command(cmd, "-w", "-t", c.table, "-X", c.chain).Run() // #nosec G204 -- fixed arguments
		}
	}
}

// kubeletRunning reports whether any kubelet process is alive.
func kubeletRunning() bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: leave the chains
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && filepath.Base(exe) == "kubelet" {
			return true
		}
	}
	return false
}
