package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/decision"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent/audit"
	"istio-cni.local/istio-cni/pkg/nodeagent/netnsdir"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/podsim"
	"istio-cni.local/istio-cni/test/poll"
)

// TestAuditTakesUpstreamsRulesOfEitherKind: pods upstream's istio-cni
// started, one with native_nftables (global.nativeNftables) and one
// without, then switched to this plugin with either setting: the node
// agent's audit finds both redirected as upstream left them, repairs
// neither, and writes nothing of the other kind on top. A meshed pod
// with no rules at all beside them is repaired: the passes that checked
// them went past the confirmation.
func TestAuditTakesUpstreamsRulesOfEitherKind(t *testing.T) {
	if _, err := os.Stat(upstreamPlugin); err != nil {
		t.Fatalf("upstream's plugin (make _output/tools/upstream-istio-cni): %v", err)
	}
	admin := clientFor(t, cluster.AdminToken)
	type started struct {
		pod *corev1.Pod
		s   *podsim.Sandbox
	}
	start := func(t *testing.T, suffix string, upstream map[string]any) started {
		name := podName(t) + "-" + suffix
		ann, ctrs := meshed(nil)
		// Both families' rules, upstream's as ours: the primary gives
		// each sandbox an IPv4 and an IPv6 address.
		ctrs[1]["env"] = []map[string]string{{"name": "ISTIO_DUAL_STACK", "value": "true"}}
		createPod(t, "team-a", name, ann, ctrs, nil)
		uid := podUID(t, "team-a", name)
		s := newSandbox(t, "team-a", name)
		if upstream != nil {
			upstreamAdd(t, s, "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME="+name+";K8S_POD_UID="+uid, upstream)
		} else {
			n := newNetwork(t)
			mustAdd(t, n, s, conflist(t, n, "1.0.0", nil))
		}
		p, err := admin.CoreV1().Pods("team-a").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// As the kubelet reports it once its containers run.
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIPs = []corev1.PodIP{{IP: s.V4.String()}}
		if s.V6.IsValid() {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: s.V6.String()})
		}
		return started{p, s}
	}
	for _, nodeNative := range []bool{false, true} {
		t.Run(map[bool]string{false: "switched to iptables", true: "switched to native"}[nodeNative], func(t *testing.T) {
			native := start(t, "native", map[string]any{"native_nftables": true})
			ipt := start(t, "iptables", map[string]any{"native_nftables": false})
			bare := start(t, "bare", nil)
			m := decision.Rules(decision.Decision{Redirect: true, Spec: iptables.DefaultSpec()}, decision.DefaultNodeSettings(), true, true)
			if d := kindHolds(t, native.s.Path(), true, m); len(d) > 0 {
				t.Fatalf("upstream's native ADD left %v", d)
			}
			if d := kindHolds(t, ipt.s.Path(), false, m); len(d) > 0 {
				t.Fatalf("upstream's iptables ADD left %v", d)
			}

			events := record.NewFakeRecorder(100)
			metrics := audit.NewMetrics(prometheus.NewRegistry())
			found := foundAt{}
			var pods []*corev1.Pod
			for _, p := range []started{native, ipt, bare} {
				found[string(p.pod.UID)] = p.s.Path()
				pods = append(pods, p.pod)
			}
			a := audit.New(audit.Config{
				Node: "node-a", Action: audit.Repair, Interval: 100 * time.Millisecond, Confirm: 10 * time.Millisecond,
				ExcludeNamespaces: []string{"kube-system"}, Settings: decision.DefaultNodeSettings(),
				Writer: applied.Writer{Backend: release.NFT, Native: nodeNative},
			}, audit.Deps{
				Pods: podList(pods), Namespaces: found,
				Network: func(w applied.Writer) audit.Network { // as the agent's
					return podnet.For(w, xtables.Programmer{Runner: xtables.ExecRunner{}})
				},
				Records: applied.Store{Dir: t.TempDir()}, Events: events, Metrics: metrics,
				Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); a.Run(ctx, nil) }()
			poll.Until(t, time.Minute, "the pod without rules repaired", func() (bool, string) {
				n := testutil.ToFloat64(metrics.Actions.WithLabelValues("repair", "success"))
				return n >= 1, fmt.Sprintf("%v repairs", n)
			})
			// Two more full passes end, the first of which may have held
			// the repair: every pod was checked since, well past its
			// confirmation.
			for range 2 {
				last := testutil.ToFloat64(metrics.LastPass)
				poll.Until(t, time.Minute, "a full pass", func() (bool, string) {
					return testutil.ToFloat64(metrics.LastPass) > last, "none since the repair"
				})
			}
			cancel()
			<-done

			if n := testutil.ToFloat64(metrics.Findings); n != 1 {
				t.Errorf("%v pods found unredirected, want 1 (the one without rules)", n)
			}
			// One pod found and repaired: the one without rules.
			close(events.Events)
			var said []string
			for e := range events.Events {
				said = append(said, e)
			}
			if len(said) != 2 || !strings.Contains(said[0], audit.ReasonMissing) || !strings.Contains(said[1], audit.ReasonRepaired) {
				t.Errorf("events %q, want the pod without rules found and repaired", said)
			}
			if n := testutil.ToFloat64(metrics.Actions.WithLabelValues("repair", "success")); n != 1 {
				t.Errorf("%v repairs, want 1", n)
			}
			// Each switched pod holds upstream's rules, and none of the
			// other kind.
			if d := kindHolds(t, native.s.Path(), true, m); len(d) > 0 {
				t.Errorf("the native pod's rules afterwards: %v", d)
			}
			if held := iptablesHeld(t, native.s.Path()); len(held) > 0 {
				t.Errorf("the native pod holds iptables rules of ours afterwards: %q", held)
			}
			if d := kindHolds(t, ipt.s.Path(), false, m); len(d) > 0 {
				t.Errorf("the iptables pod's rules afterwards: %v", d)
			}
			if d := kindHolds(t, ipt.s.Path(), true, m); len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), "missing") {
				t.Errorf("the iptables pod holds native tables afterwards: %v", d)
			}
			if d := kindHolds(t, bare.s.Path(), nodeNative, m); len(d) > 0 {
				t.Errorf("the repaired pod's rules: %v", d)
			}
		})
	}
}

// kindHolds is how the namespace at path differs from m as native
// nftables or iptables (found in either backend) hold it.
func kindHolds(t *testing.T, path string, native bool, m iptables.Model) []string {
	t.Helper()
	d, err := podnet.For(applied.Writer{Backend: release.NFT, Native: native, Guessed: !native},
		xtables.Programmer{Runner: xtables.ExecRunner{}}).Check(context.Background(), path, m)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// iptablesHeld lists our IPv4 iptables rules in the namespace at path, in
// both backends.
func iptablesHeld(t *testing.T, path string) []string {
	t.Helper()
	var held []string
	for _, b := range []release.Backend{release.NFT, release.Legacy} {
		held = append(held, readRules(t, path, b, iptables.IPv4).OursListing()...)
	}
	return held
}

type podList []*corev1.Pod

func (l podList) List() []*corev1.Pod { return l }

// foundAt finds each pod's namespace by its UID, as netnsdir.Finder by
// its addresses.
type foundAt map[string]string

func (f foundAt) Find(pods map[string][]netip.Addr) (netnsdir.Result, error) {
	res := netnsdir.Result{Found: map[string]netnsdir.NSFile{}}
	for uid := range pods {
		path, ok := f[uid]
		if !ok {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return res, err
		}
		res.Found[uid] = netnsdir.NSFile{Path: path, Inode: st.Ino}
	}
	return res, nil
}
