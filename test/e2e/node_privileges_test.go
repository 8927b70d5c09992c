package e2e

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"

	"istio-cni.local/istio-cni/test/poll"
)

// 18. The running agent holds what docs/security.md says and nothing more:
// exactly NET_ADMIN, NET_RAW, SYS_ADMIN and SETPCAP; a bounding set of
// NET_ADMIN and NET_RAW once the audit started (what the iptables it runs
// get); no new privileges; its own PID namespace (no host processes, so no
// /proc/<pid>/root into the host); no host /proc or host root mounted,
// only the node's CNI, run and netns directories and the xtables lock,
// the netns directory read-only; a read-only root file system. The
// plugin's credential on the node is a token bound to the node, living a
// day at most.
func TestAgentPrivileges(t *testing.T) {
	requireInstalled(t)
	pid, err := env.node.ContainerPID(t.Context(), "istio-cni", "install-cni")
	if err != nil {
		t.Fatal(err)
	}
	caps := func(names ...int) uint64 {
		var m uint64
		for _, c := range names {
			m |= 1 << c
		}
		return m
	}
	wantEff := caps(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP)
	wantBnd := caps(unix.CAP_NET_ADMIN, unix.CAP_NET_RAW)
	poll.Until(t, 30*time.Second, "the agent's capabilities", func() (bool, string) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return false, err.Error()
		}
		eff, bnd, nnp := statusField(string(st), "CapEff"), statusField(string(st), "CapBnd"), statusField(string(st), "NoNewPrivs")
		ok := hexIs(eff, wantEff) && hexIs(bnd, wantBnd) && nnp == "1"
		return ok, fmt.Sprintf("CapEff %s (want %#016x), CapBnd %s (want %#016x), NoNewPrivs %s (want 1)", eff, wantEff, bnd, wantBnd, nnp)
	})

	self, _ := os.Readlink("/proc/self/ns/pid")
	agent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil || agent == self {
		t.Errorf("the agent's PID namespace %s (%v) is the host's %s: it would see host processes' roots", agent, err, self)
	}

	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	var host []string
	for _, line := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		point, opts := f[4], f[5]
		switch {
		case point == "/host/proc" || point == "/host/root" || point == "/host":
			t.Errorf("the agent mounts %s: %s", point, line)
		case strings.HasPrefix(point, "/host/") && !strings.HasPrefix(point, "/host/var/run/netns/"):
			host = append(host, point)
			if point == "/host/var/run/netns" && !slices.Contains(strings.Split(opts, ","), "ro") {
				t.Errorf("the netns directory is mounted writable: %s", line)
			}
		}
	}
	slices.Sort(host)
	want := []string{"/host/etc/cni/net.d", "/host/opt/cni/bin", "/host/var/run/istio-cni", "/host/var/run/netns"}
	if !slices.Equal(host, want) {
		t.Errorf("the agent's host mounts %v, want %v", host, want)
	}
	if !strings.Contains(string(mi), " /run/xtables.lock ") {
		t.Errorf("no /run/xtables.lock in the agent's mounts:\n%s", mi)
	}

	kc, err := clientcmd.LoadFromFile(kubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for name, auth := range kc.AuthInfos {
		parts := strings.Split(auth.Token, ".")
		if len(parts) != 3 {
			t.Fatalf("the plugin's kubeconfig user %s holds no JWT", name)
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Exp, Iat int64
			K8s      struct {
				Node           *struct{ Name string }
				ServiceAccount struct{ Name string }
			} `json:"kubernetes.io"`
		}
		if err := json.Unmarshal(payload, &c); err != nil {
			t.Fatal(err)
		}
		if c.K8s.Node == nil || c.K8s.Node.Name != env.node.Name || c.K8s.ServiceAccount.Name != "istio-cni-plugin" || c.Exp-c.Iat > 86400 {
			t.Errorf("the plugin's token: %+v; want the plugin's ServiceAccount, bound to node %s, a day at most", c, env.node.Name)
		}
	}

	probe := fmt.Sprintf("/proc/%d/root/escape-probe", pid)
	if err := os.WriteFile(probe, []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) {
		_ = os.Remove(probe)
		t.Errorf("writing into the agent's root file system: %v, want EROFS", err)
	}
}

func statusField(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func hexIs(s string, want uint64) bool {
	n, err := strconv.ParseUint(s, 16, 64)
	return err == nil && n == want
}
