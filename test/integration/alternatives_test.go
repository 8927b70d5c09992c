package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/test/podsim"
)

// alternatives makes the node's `iptables` programs lead to v4's backend
// and `ip6tables`' to v6's, as Debian's and Ubuntu's two alternatives do
// (update-alternatives sets each apart), for every process the chain
// starts from now on.
func alternatives(t *testing.T, v4, v6 release.Backend) {
	t.Helper()
	dir := t.TempDir()
	for family, b := range map[string]release.Backend{"iptables": v4, "ip6tables": v6} {
		for _, tool := range []string{"", "-save", "-restore"} {
			if err := os.Symlink("/usr/sbin/xtables-"+string(b)+"-multi", filepath.Join(dir, family+tool)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
}

// TestAlternativesMovedUnderARunningPod: a dual-stack pod meshed on a node
// whose iptables alternatives lead to legacy, then the node's
// alternatives are set to nft (iptables) and left on legacy (ip6tables),
// as an administrator moving a node to nf_tables one command at a time
// would. The pod keeps its rules where its ADD wrote them; its CHECK reads
// them there, as its record says, and passes, and its traffic still goes
// through the proxy. A pod meshed after the change has each family where
// the node's program for it now leads, and its CHECK passes too.
func TestAlternativesMovedUnderARunningPod(t *testing.T) {
	n := newNetwork(t)
	server := serverPod(t, n)
	conf := istioConf(map[string]any{"records_dir": t.TempDir()})
	// A sandbox of a meshed dual-stack pod, its uid passed as runtimes
	// pass it: CHECK finds the sandbox's record by it.
	meshedDualStack := func(name string) *podsim.Sandbox {
		ann, ctrs := meshed(nil)
		ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_DUAL_STACK", "value": "true"}}
		createPod(t, "team-a", name, ann, ctrs, nil)
		s := newSandbox(t, "team-a", name)
		s.SetPodUID(podUID(t, "team-a", name))
		return s
	}
	type placed struct{ v4, v6 release.Backend }
	assertIn := func(path string, at placed) {
		t.Helper()
		spec := iptables.DefaultSpec()
		for _, rs := range iptables.Build(spec, true, true).Rulesets() {
			b := at.v4
			if rs.Family == iptables.IPv6 {
				b = at.v6
			}
			if d := iptables.Diff(rs, readRules(t, path, b, rs.Family)); len(d) > 0 {
				t.Errorf("%s rules in %s differ from the model:\n%v", rs.Family, b, d)
			}
			if obs := readRules(t, path, b.Other(), rs.Family); !obs.Empty() {
				t.Errorf("%s: %s holds ISTIO chains too", rs.Family, b.Other())
			}
		}
	}
	throughProxy := func(path string) {
		t.Helper()
		for _, dst := range []string{hostPort(server.V4, serverPort), hostPort(server.V6, serverPort)} {
			if got := where(t, path, 1000, dst); got != "proxy" {
				t.Errorf("the app's connection to %s: %s, want through the proxy", dst, got)
			}
		}
	}

	alternatives(t, release.Legacy, release.Legacy)
	old := meshedDualStack(podName(t) + "-before")
	mustAdd(t, n, old, conflist(t, n, "1.0.0", conf))
	if !old.V6.IsValid() {
		t.Fatal("the pod has no IPv6 address")
	}
	startIn(t, old.Path(), proxyUID, "proxy")
	assertIn(old.Path(), placed{release.Legacy, release.Legacy})

	alternatives(t, release.NFT, release.Legacy)
	if err := n.Check(context.Background(), old); err != nil {
		t.Errorf("CHECK of the pod meshed before the change: %v", err)
	}
	assertIn(old.Path(), placed{release.Legacy, release.Legacy})
	throughProxy(old.Path())

	s := meshedDualStack(podName(t) + "-after")
	mustAdd(t, n, s, conflist(t, n, "1.0.0", conf))
	startIn(t, s.Path(), proxyUID, "proxy")
	assertIn(s.Path(), placed{release.NFT, release.Legacy})
	if err := n.Check(context.Background(), s); err != nil {
		t.Errorf("CHECK of the pod meshed after the change: %v", err)
	}
	throughProxy(s.Path())
}
