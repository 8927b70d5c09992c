package audit

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"

	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/test/podsim"
)

// TestRepairNeedsEachCapability is why the DaemonSet adds each capability:
// a repair (enter the pod's namespace, iptables-restore, verify with
// iptables-save) run with the agent's set succeeds, and without any one of
// them fails. NET_RAW is legacy's only (its raw socket); nft speaks
// netlink. The repair runs in a child of the test whose bounding set
// setpriv limits (a root process's exec gets exactly its bounding set).
// A hostUsers: false pod's namespace (its user namespace denying
// setgroups) is repaired with the agent's set too.
func TestRepairNeedsEachCapability(t *testing.T) {
	if path := os.Getenv("AUDIT_CAPS_NETNS"); path != "" {
		repairHelper(t, path, release.Backend(os.Getenv("AUDIT_CAPS_BACKEND")))
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	for _, tc := range []struct {
		backend release.Backend
		caps    string
		fails   string // what the failure says; "" for success
		userns  bool   // a hostUsers: false pod's namespace (podsim.NewUserNSNetns)
	}{
		{release.NFT, "net_admin,net_raw,sys_admin", "", false},
		{release.Legacy, "net_admin,net_raw,sys_admin", "", false},
		{release.NFT, "net_admin,net_raw", "entering the network namespace: operation not permitted", false}, // no setns
		{release.Legacy, "net_admin,net_raw", "entering the network namespace: operation not permitted", false},
		{release.NFT, "net_raw,sys_admin", "Permission denied", false}, // no iptables
		{release.Legacy, "net_raw,sys_admin", "unable to initialize table", false},
		{release.NFT, "net_admin,sys_admin", "", false},
		{release.Legacy, "net_admin,sys_admin", "unable to initialize table", false}, // no raw socket
		// nsenter, run with the agent's set, writes as the pod's root.
		{release.NFT, "net_admin,net_raw,sys_admin", "", true},
		{release.Legacy, "net_admin,net_raw,sys_admin", "", true},
	} {
		name := string(tc.backend) + "/" + tc.caps
		if tc.userns {
			name += "/userns"
		}
		t.Run(name, func(t *testing.T) {
			newNS := testutils.NewNS
			if tc.userns {
				newNS = podsim.NewUserNSNetns
			}
			netns, err := newNS()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = podsim.CloseNetns(netns) })
			bounding := "-all"
			for _, c := range strings.Split(tc.caps, ",") {
				bounding += ",+" + c
			}
			cmd := exec.Command(setpriv, "--bounding-set="+bounding, "--inh-caps=-all", "--", // #nosec G204 -- test
				os.Args[0], "-test.run=^TestRepairNeedsEachCapability$", "-test.v")
			cmd.Env = append(os.Environ(), "AUDIT_CAPS_NETNS="+netns.Path(), "AUDIT_CAPS_BACKEND="+string(tc.backend))
			out, err := cmd.CombinedOutput()
			switch {
			case tc.fails == "" && err != nil:
				t.Errorf("with %s, the repair failed: %v\n%s", tc.caps, err, out)
			case tc.fails != "" && (err == nil || !strings.Contains(string(out), tc.fails)):
				t.Errorf("with only %s: %v, want a failure saying %q\n%s", tc.caps, err, tc.fails, out)
			}
		})
	}
}

// repairHelper repairs an empty namespace and checks the result.
func repairHelper(t *testing.T, path string, backend release.Backend) {
	network := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: backend}}
	m := decision.Rules(mustDecide(t, meshed("caps")), decision.DefaultNodeSettings(), true, false)
	ctx := context.Background()
	if err := network.Reconcile(ctx, path, m); err != nil {
		t.Fatal(err)
	}
	if diffs, err := network.Check(ctx, path, m); err != nil || len(diffs) > 0 {
		t.Fatal(diffs, err)
	}
}
