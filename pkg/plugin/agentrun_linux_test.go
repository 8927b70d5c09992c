package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/kube"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/wire/handoff"
	"istio-cni.local/istio-cni/pkg/wire/reports"
	"istio-cni.local/istio-cni/test/podsim"
)

// requireNFTLayout skips unless the node's iptables-nft is a release
// nfnl lays out, as on the nodes the agent writes ADDs for.
func requireNFTLayout(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	v, err := xtables.NFTVersion("iptables-nft-restore")
	if err != nil || !release.HasLayout(v) {
		t.Skipf("iptables-nft %q (%v) is none of %q", v, err, release.Layouts)
	}
}

// newNetns makes a namespace (as pkg/podnet's tests do) and returns its
// descriptor and its path.
func newNetns(t testing.TB) (int, string) {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	return int(n.Fd()), n.Path()
}

// saveIn prints a family's tables in the namespace, as a user would see
// them (nsenter ... iptables-save), without the comment lines.
func saveIn(t *testing.T, path string, f iptables.Family) string {
	t.Helper()
	name := "iptables-nft-save"
	if f == iptables.IPv6 {
		name = "ip6tables-nft-save"
	}
	out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+path, name).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	var keep []string
	for line := range strings.Lines(string(out)) {
		if !strings.HasPrefix(line, "#") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

type agentFixture struct {
	side    AgentSide
	run     string // the agent's view of the run directory
	release string // the node's iptables-nft release, as the shim hands it on
	pods    map[string]*kube.Pod
	reads   bool
}

func newAgentFixture(t testing.TB) *agentFixture {
	f := &agentFixture{run: t.TempDir(), pods: map[string]*kube.Pod{}, reads: true}
	cache := filepath.Join(f.run, "cache")
	for _, d := range []string{cache, filepath.Join(f.run, "sandboxes"), filepath.Join(f.run, "log")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	v, err := xtables.CachedNFTVersion(filepath.Join(cache, "iptables-nft-restore.version"), "iptables-nft-restore")
	if err != nil {
		t.Fatal(err)
	}
	f.release = v
	f.side = AgentSide{
		Lookup: func(ns, name string) (*kube.Pod, bool) {
			p, ok := f.pods[ns+"/"+name]
			return p, ok
		},
		ReadsBack: func() bool { return f.reads },
		// The node's run directory is /node/run; the agent sees it at f.run.
		NodePath: func(p string) (string, bool) {
			rel, ok := strings.CutPrefix(p, "/node/run/")
			return filepath.Join(f.run, rel), ok
		},
		Now: time.Now,
	}
	return f
}

// meshed puts a meshed team-a/web-1 of uid in the agent's informer.
func (f *agentFixture) meshed(uid string) *kube.Pod {
	pod := meshedPod(nil)
	pod.Metadata.UID = uid
	f.pods["team-a/web-1"] = pod
	return pod
}

// entry is an ADD's stdin as the installer writes the entry, on the node.
func (f *agentFixture) entry(prev string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"k8s","type":"istio-cni","iptables_backend":"nft","exclude_namespaces":["kube-system"],` +
		`"pod_socket":"/node/run/pods.sock","reports_socket":"/node/run/reports.sock","records_dir":"/node/run/sandboxes","log_file":"/node/run/log/istio-cni.log","cache_dir":"/node/run/cache",` +
		`"prevResult":` + prev + `}`)
}

func (f *agentFixture) request(netnsPath, uid string, prev string) handoff.Request {
	return handoff.Request{ContainerID: "c-" + uid, Netns: netnsPath, IfName: "eth0", Path: "/opt/cni/bin", Stdin: f.entry(prev),
		Args:     "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-1;K8S_POD_UID=" + uid,
		Netlink:  []string{"ipv4", "ipv6"},
		Release:  f.release,
		Deadline: time.Now().Add(handoff.Budget).UnixNano()}
}

// reportsSocket listens where the plugin sends reports (a datagram
// socket, as the agent's): read it with MSG_DONTWAIT.
func reportsSocket(t *testing.T, path string) int {
	t.Helper()
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(sock) })
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	return sock
}

// The agent's ADD, in a real namespace, writes what the plugin's own ADD
// writes: the same iptables-save text, the same record, the same result.
func TestAgentRunAddWritesWhatThePluginWrites(t *testing.T) {
	requireNFTLayout(t)
	f := newAgentFixture(t)
	f.meshed("u1")
	// The agent's reports socket, read without blocking: a report is
	// queued the moment it is sent.
	sock := reportsSocket(t, filepath.Join(f.run, "reports.sock"))
	queued := func() (reports.Report, bool) {
		buf := make([]byte, 64<<10)
		n, _, err := unix.Recvfrom(sock, buf, unix.MSG_DONTWAIT)
		if err != nil {
			return reports.Report{}, false
		}
		var r reports.Report
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			t.Fatalf("report %q: %v", buf[:n], err)
		}
		return r, true
	}
	for _, prev := range []string{prevV4, prevDual} {
		fd, path := newNetns(t)
		resp, after := f.side.RunAdd(f.request(path, "u1", prev), fd)
		if !resp.Done {
			t.Fatalf("handed back: %s", resp.HandBack)
		}
		// The report, which wakes the audit, waits for the answer.
		if r, ok := queued(); ok {
			t.Fatalf("reported before the answer: %+v", r)
		}
		after()
		r, ok := queued()
		if !ok || r.Verb != "ADD" || r.PodUID != "u1" || r.Netns != path {
			t.Errorf("report %+v (%v), want the ADD of u1 in %s (the runtime's path, not the descriptor)", r, ok, path)
		}
		var result map[string]any
		if err := json.Unmarshal(resp.Stdout, &result); err != nil || result["ips"] == nil {
			t.Errorf("stdout %s: %v, want the prevResult", resp.Stdout, err)
		}
		if !bytes.Contains(resp.Stderr, []byte(`"ran_in":"agent"`)) || !bytes.Contains(resp.Stderr, []byte(`"rules_by":"netlink"`)) {
			t.Errorf("log line %s, want ran_in agent and rules_by netlink", resp.Stderr)
		}
		rec, err := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}.ForPod("u1")
		if err != nil || len(rec) == 0 || rec[len(rec)-1].Backend != release.NFT || rec[len(rec)-1].NetnsInode == 0 {
			t.Fatalf("records %+v, %v: want one with the namespace and nft; log %s", rec, err, resp.Stderr)
		}
		// The plugin's own path, iptables-restore, into a second namespace.
		_, restored := newNetns(t)
		want, _ := rec[len(rec)-1].Model()
		restoreIn(t, restored, want)
		for _, rs := range want.Rulesets() {
			if got, want := saveIn(t, path, rs.Family), saveIn(t, restored, rs.Family); got != want {
				t.Errorf("%s: the agent wrote\n%s\nrestore writes\n%s", rs.Family, got, want)
			}
		}
		_ = os.Remove(filepath.Join(f.run, "sandboxes", "u1", "c-u1.json"))
	}
	log, err := os.ReadFile(filepath.Join(f.run, "log", "istio-cni.log"))
	if err != nil || bytes.Count(log, []byte("\n")) != 2 {
		t.Errorf("log_file %q, %v: want the two ADDs' lines where the agent sees it", log, err)
	}
}

// The agent lays the rules out as the node's release writes them, as the
// shim found it (Request.Release), not as its container's iptables does:
// 1.8.7 matches ports with the x_tables tcp match where the others load
// the port, 1.8.10 and later load IPv4's protocol from the header
// (nfnl.Layout). A release laid out anew must be named here.
func TestAgentRunAddLaysOutTheShimsRelease(t *testing.T) {
	requireNFTLayout(t)
	headerProtocol := map[string]bool{"1.8.7": false, "1.8.8": false, "1.8.9": false, "1.8.10": true, "1.8.11": true, "1.8.12": true, "1.8.13": true}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft to dump the namespace's expressions with")
	}
	for _, v := range release.Layouts {
		t.Run(v, func(t *testing.T) {
			if _, known := headerProtocol[v]; !known {
				t.Fatalf("iptables %s: how it loads IPv4's protocol is not named here", v)
			}
			f := newAgentFixture(t)
			f.meshed("u1")
			fd, path := newNetns(t)
			req := f.request(path, "u1", prevV4)
			req.Release = v
			if resp, _ := f.side.RunAdd(req, fd); !resp.Done {
				t.Fatalf("handed back: %s", resp.HandBack)
			}
			out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+path, "nft", "--debug=netlink", "list", "table", "ip", "nat").CombinedOutput()
			if err != nil {
				t.Fatalf("nft: %v\n%s", err, out)
			}
			dump := string(out)
			for expr, want := range map[string]bool{
				"[ match name tcp rev 0 ]":                          v == "1.8.7",
				"[ payload load 2b @ transport header + 2 => reg 1": v != "1.8.7",
				"[ payload load 1b @ network header + 9 => reg":     headerProtocol[v],
			} {
				if strings.Contains(dump, expr) != want {
					t.Errorf("iptables %s's layout: %q in the dump is %v, want %v\n%s", v, expr, !want, want, dump)
				}
			}
		})
	}
}

// A pod with hostUsers: false: its rules cannot go over netlink (the
// kernel takes owner matches only from inside its user namespace), so the
// agent hands the ADD back having written nothing; the plugin restores.
func TestAgentRunAddHandsBackAUserNamespacePod(t *testing.T) {
	requireNFTLayout(t)
	f := newAgentFixture(t)
	f.meshed("u1")
	n, err := podsim.NewUserNSNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = podsim.CloseNetns(n) })
	resp, after := f.side.RunAdd(f.request(n.Path(), "u1", prevV4), int(n.Fd()))
	if resp.Done || after != nil || !strings.Contains(resp.HandBack, "hostUsers: false") {
		t.Fatalf("%+v, want handed back naming hostUsers: false", resp)
	}
	if out := saveIn(t, n.Path(), iptables.IPv4); strings.Contains(out, "ISTIO") {
		t.Errorf("the agent wrote rules before handing back:\n%s", out)
	}
	if recs := tree(t, filepath.Join(f.run, "sandboxes")); len(recs) != 1 { // the directory itself
		t.Errorf("records %v, want none", recs)
	}
}

// On a legacy node the agent writes x_tables from its own process (the
// shim names the legacy families): what legacy's iptables-save then
// prints is what the plugin's own restore writes; past the shim's
// deadline it writes nothing and hands the ADD back.
func TestAgentRunAddOnALegacyNode(t *testing.T) {
	if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
		t.Skip("no iptables-legacy-restore")
	}
	f := newAgentFixture(t)
	f.meshed("u1")
	legacyReq := func(path string) handoff.Request {
		req := f.request(path, "u1", prevDual)
		req.Stdin = bytes.Replace(req.Stdin, []byte(`"iptables_backend":"nft"`), []byte(`"iptables_backend":"legacy"`), 1)
		req.Netlink, req.Release, req.Legacy = nil, "", []string{"ipv4", "ipv6"}
		return req
	}
	fd, path := newNetns(t)
	resp, _ := f.side.RunAdd(legacyReq(path), fd)
	if !resp.Done {
		t.Fatalf("handed back: %s", resp.HandBack)
	}
	if !bytes.Contains(resp.Stderr, []byte(`"ran_in":"agent"`)) || !bytes.Contains(resp.Stderr, []byte(`"rules_by":"x_tables"`)) {
		t.Errorf("log line %s, want ran_in agent and rules_by x_tables", resp.Stderr)
	}
	rec, err := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}.ForPod("u1")
	if err != nil || len(rec) != 1 || rec[0].Backend != release.Legacy {
		t.Fatalf("records %+v, %v: want one with legacy", rec, err)
	}
	want, _ := rec[0].Model()
	for _, rs := range want.Rulesets() {
		out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+path, xtables.CommandsFor(release.Legacy, rs.Family).Save).Output()
		if err != nil {
			t.Fatal(err)
		}
		obs, err := iptables.ParseSave(out)
		if err != nil {
			t.Fatal(err)
		}
		if d := iptables.Diff(rs, obs); len(d) > 0 {
			t.Errorf("%s: legacy holds other than the model: %v", rs.Family, d)
		}
	}

	// Past the deadline: nothing written, handed back.
	fd, path = newNetns(t)
	late := legacyReq(path)
	late.ContainerID = "c-late"
	f.side.Now = func() time.Time { return time.Unix(0, late.Deadline).Add(-time.Millisecond) } // the agent's checks pass ...
	w, err := (&agentRun{req: late, legacy: map[iptables.Family]bool{iptables.IPv4: true}}).write(nil, plan{}, true)
	if err != nil || len(w.Netlink) != 0 || !w.Legacy[iptables.IPv4] || !w.Only || !w.Trusted || !w.Deadline.Equal(time.Unix(0, late.Deadline)) {
		t.Errorf("legacy write %+v, %v: want trusted x_tables replaces only, bounded by the shim's deadline", w, err)
	}
	late.Deadline = time.Now().Add(-time.Second).UnixNano()
	f.side.Now = time.Now
	if resp, _ := f.side.RunAdd(late, fd); resp.Done || resp.HandBack == "" {
		t.Errorf("a late request: %+v, want handed back", resp)
	}
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+path, xtables.CommandsFor(release.Legacy, fam).Save).Output()
		if err != nil || strings.Contains(string(out), "ISTIO") {
			t.Errorf("%s after a late request: %v\n%s", fam, err, out)
		}
	}

	// A sandbox that holds rules already (its record lost): the agent
	// neither restores blindly on top nor reads back; it hands back, and
	// the rules stay as they were.
	fd, path = newNetns(t)
	old := legacyReq(path)
	old.ContainerID = "c-old"
	if resp, _ := f.side.RunAdd(old, fd); !resp.Done {
		t.Fatalf("first ADD handed back: %s", resp.HandBack)
	}
	before := legacySave(t, path)
	if err := os.RemoveAll(filepath.Join(f.run, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	again := legacyReq(path)
	again.ContainerID = "c-again"
	if resp, _ := f.side.RunAdd(again, fd); resp.Done || !strings.Contains(resp.HandBack, "not fresh") {
		t.Errorf("an ADD into a sandbox holding rules: %+v, want handed back naming the table not fresh", resp)
	}
	if after := legacySave(t, path); after != before {
		t.Errorf("the hand-back changed the rules\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A pod with hostUsers: false: its owner matches are the plugin's to
	// restore from inside its user namespace; the agent writes nothing.
	n, err := podsim.NewUserNSNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = podsim.CloseNetns(n) })
	userns := legacyReq(n.Path())
	userns.ContainerID = "c-userns"
	if resp, _ := f.side.RunAdd(userns, int(n.Fd())); resp.Done || !strings.Contains(resp.HandBack, "hostUsers: false") {
		t.Errorf("a user namespace pod: %+v, want handed back naming hostUsers: false", resp)
	}
	if out := legacySave(t, n.Path()); strings.Contains(out, "ISTIO") {
		t.Errorf("the agent wrote a user namespace pod's rules:\n%s", out)
	}
}

// legacySave is both families' iptables-legacy-save in the namespace at
// path, without the comment lines (which carry the time).
func legacySave(t *testing.T, path string) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		out, err := exec.CommandContext(t.Context(), "nsenter", "--net="+path, xtables.CommandsFor(release.Legacy, fam).Save).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") {
				b.WriteString(l + "\n")
			}
		}
	}
	return b.String()
}

// In the agent, the report of an ADD whose entry names the agent's own
// socket goes to the agent's handler in its process, after the answer;
// an entry naming another socket is reported there, as the plugin does.
func TestAgentRunAddReportsInProcess(t *testing.T) {
	requireNFTLayout(t)
	for name, own := range map[string]bool{"the agent's own socket": true, "another socket": false} {
		t.Run(name, func(t *testing.T) {
			f := newAgentFixture(t)
			f.meshed("u1")
			sock := reportsSocket(t, filepath.Join(f.run, "reports.sock"))
			var got []reports.Report
			f.side.Report = func(r reports.Report) { got = append(got, r) }
			f.side.ReportsSocket = filepath.Join(f.run, "elsewhere.sock")
			if own {
				f.side.ReportsSocket = filepath.Join(f.run, "reports.sock")
			}
			fd, path := newNetns(t)
			resp, after := f.side.RunAdd(f.request(path, "u1", prevV4), fd)
			if !resp.Done {
				t.Fatalf("handed back: %s", resp.HandBack)
			}
			if len(got) != 0 {
				t.Fatalf("reported before the answer: %+v", got)
			}
			after()
			buf := make([]byte, 64<<10)
			_, _, sockErr := unix.Recvfrom(sock, buf, unix.MSG_DONTWAIT)
			switch {
			case own && (len(got) != 1 || got[0].Verb != "ADD" || got[0].PodUID != "u1" || got[0].Netns != path):
				t.Errorf("in process: %+v, want the ADD of u1 in %s", got, path)
			case own && sockErr == nil:
				t.Errorf("reported on the socket too")
			case !own && (len(got) != 0 || sockErr != nil):
				t.Errorf("in process %+v, on the socket %v: want the socket only", got, sockErr)
			}
		})
	}
}

// The agent's share of a handed-off ADD, for profiling (go test -bench
// AgentRunAdd -cpuprofile): each iteration a fresh namespace.
func BenchmarkAgentRunAdd(b *testing.B) {
	b.Run("nft", func(b *testing.B) {
		requireNFTLayout(b)
		benchmarkAgentRunAdd(b, func(req *handoff.Request) {})
	})
	b.Run("legacy", func(b *testing.B) {
		if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
			b.Skip("no iptables-legacy-restore")
		}
		benchmarkAgentRunAdd(b, func(req *handoff.Request) {
			req.Stdin = bytes.Replace(req.Stdin, []byte(`"iptables_backend":"nft"`), []byte(`"iptables_backend":"legacy"`), 1)
			req.Netlink, req.Release, req.Legacy = nil, "", []string{"ipv4"}
		})
	})
}

func benchmarkAgentRunAdd(b *testing.B, on func(*handoff.Request)) {
	f := newAgentFixture(b)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		fd, path := newNetns(b)
		uid := fmt.Sprint("u", i)
		req := f.request(path, uid, prevV4)
		on(&req)
		f.meshed(uid)
		b.StartTimer()
		if resp, _ := f.side.RunAdd(req, fd); !resp.Done {
			b.Fatalf("handed back: %s", resp.HandBack)
		}
	}
}

// A repeated ADD the agent would pass through, of a sandbox an earlier ADD
// redirected (the pod annotated out of the mesh since): the agent answers
// it, leaving the rules and their record as they were, and says so.
func TestAgentRunAddKeepsAnEarlierRedirect(t *testing.T) {
	requireNFTLayout(t)
	f := newAgentFixture(t)
	pod := f.meshed("u1")
	fd, path := newNetns(t)
	restoreIn(t, path, iptables.Build(iptables.DefaultSpec(), true, false))
	store := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}
	earlier := applied.Record{PodUID: "u1", Pod: "team-a/web-1", Container: "c-u1", NetnsInode: netnsInode(path), IPv4: true, Spec: iptables.DefaultSpec(), Backend: release.NFT}
	if err := store.Write(earlier); err != nil {
		t.Fatal(err)
	}
	pod.Metadata.Annotations["sidecar.istio.io/inject"] = "false"
	before := saveIn(t, path, iptables.IPv4)
	resp, _ := f.side.RunAdd(f.request(path, "u1", prevV4), fd)
	if !resp.Done || !bytes.Contains(resp.Stderr, []byte("its rules and record stay")) {
		t.Fatalf("answer %+v, stderr %s: want done, saying the rules stay", resp, resp.Stderr)
	}
	if after := saveIn(t, path, iptables.IPv4); after != before {
		t.Errorf("the namespace changed:\n%s\nwant\n%s", after, before)
	}
	if recs, err := store.ForPod("u1"); err != nil || len(recs) != 1 || recs[0].Passed || recs[0].Backend != release.NFT {
		t.Errorf("records %+v, %v: want the earlier one", recs, err)
	}
}

// Whatever keeps the agent from finishing an ADD, it hands it back having
// logged, recorded and reported nothing, and without removing what the
// namespace held: the plugin then runs the ADD and reconciles.
func TestAgentRunAddHandsBack(t *testing.T) {
	requireNFTLayout(t)
	for name, c := range map[string]struct {
		prev  string
		setup func(f *agentFixture, req *handoff.Request, path string)
		why   string
	}{
		"the agent does not hold the pod": {prevV4, func(f *agentFixture, _ *handoff.Request, _ string) { delete(f.pods, "team-a/web-1") }, "does not hold the pod"},
		"the audit does not read back":    {prevV4, func(f *agentFixture, _ *handoff.Request, _ string) { f.reads = false }, "does not read rules back"},
		"a repeated ADD": {prevV4, func(f *agentFixture, _ *handoff.Request, _ string) {
			if err := (applied.Store{Dir: filepath.Join(f.run, "sandboxes")}).Write(applied.Record{PodUID: "u1", Container: "c-u1", Passed: true}); err != nil {
				t.Fatal(err)
			}
		}, "repeated ADD"},
		"the namespace holds our chains already": {prevV4, func(_ *agentFixture, _ *handoff.Request, path string) {
			restoreIn(t, path, iptables.Build(iptables.DefaultSpec(), true, false))
		}, "not written over netlink"},
		"records_dir outside the run directory": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) {
			req.Stdin = bytes.Replace(req.Stdin, []byte(`"/node/run/sandboxes"`), []byte(`"/elsewhere/sandboxes"`), 1)
		}, "does not see /elsewhere/sandboxes"},
		"no family over netlink": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) { req.Netlink = nil }, "not nf_tables"},
		"IPv6 not over netlink":  {prevDual, func(_ *agentFixture, req *handoff.Request, _ string) { req.Netlink = []string{"ipv4"} }, "ipv6"},
		// A release nfnl lays out no rules as, or none (a shim of
		// before Release), is the plugin's to write.
		"a release the agent lays out no rules as": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) { req.Release = "1.8.99" }, `iptables "1.8.99"`},
		"no release": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) { req.Release = "" }, `iptables ""`},
		"an invalid annotation": {prevV4, func(f *agentFixture, _ *handoff.Request, _ string) {
			f.pods["team-a/web-1"].Metadata.Annotations["traffic.sidecar.istio.io/includeInboundPorts"] = "not-a-port"
		}, "bad port"},
		"no CNI_PATH": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) { req.Path = "" }, "CNI_PATH"},
		"the shim stopped waiting": {prevV4, func(f *agentFixture, req *handoff.Request, _ string) {
			req.Deadline = f.side.Now().Add(-time.Millisecond).UnixNano()
		}, "stopped waiting"},
		"no deadline": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) { req.Deadline = 0 }, "no deadline"},
		// The deadline passes while the agent reads the pod: it writes
		// nothing after.
		"the shim stopped waiting during the ADD": {prevV4, func(f *agentFixture, req *handoff.Request, _ string) {
			past := false
			lookup := f.side.Lookup
			f.side.Lookup = func(ns, name string) (*kube.Pod, bool) { past = true; return lookup(ns, name) }
			f.side.Now = func() time.Time {
				if past {
					return time.Unix(0, req.Deadline)
				}
				return time.Now()
			}
		}, "stopped waiting"},
		// The primary's result of that version is refused first.
		"an unsupported cniVersion": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) {
			req.Stdin = bytes.Replace(req.Stdin, []byte(`"cniVersion":"1.0.0","name"`), []byte(`"cniVersion":"9.9.9","name"`), 1)
		}, `version "9.9.9"`},
		"an unsupported cniVersion, no prevResult": {"null", func(_ *agentFixture, req *handoff.Request, _ string) {
			req.Stdin = bytes.Replace(req.Stdin, []byte(`"cniVersion":"1.0.0","name"`), []byte(`"cniVersion":"9.9.9","name"`), 1)
		}, "cniVersion"},
		"an invalid network name": {prevV4, func(_ *agentFixture, req *handoff.Request, _ string) {
			req.Stdin = bytes.Replace(req.Stdin, []byte(`"name":"k8s"`), []byte(`"name":"k 8s"`), 1)
		}, "name is missing or invalid"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newAgentFixture(t)
			f.meshed("u1")
			fd, path := newNetns(t)
			req := f.request(path, "u1", c.prev)
			c.setup(f, &req, path)
			before := saveIn(t, path, iptables.IPv4) + saveIn(t, path, iptables.IPv6)
			recsBefore := tree(t, filepath.Join(f.run, "sandboxes"))
			resp, after := f.side.RunAdd(req, fd)
			if resp.Done || !strings.Contains(resp.HandBack, c.why) || after != nil {
				t.Fatalf("answer %+v (after %v), want handed back for %q", resp, after != nil, c.why)
			}
			if len(resp.Stdout) > 0 || len(resp.Stderr) > 0 {
				t.Errorf("stdout %q, stderr %q: want nothing", resp.Stdout, resp.Stderr)
			}
			if got := saveIn(t, path, iptables.IPv4) + saveIn(t, path, iptables.IPv6); got != before {
				t.Errorf("the namespace changed:\n%s\nwas\n%s", got, before)
			}
			// Nothing staged is left either: no temp file, no directory.
			if recs := tree(t, filepath.Join(f.run, "sandboxes")); !slices.Equal(recs, recsBefore) {
				t.Errorf("records %v, want %v", recs, recsBefore)
			}
			if log, err := os.ReadFile(filepath.Join(f.run, "log", "istio-cni.log")); len(log) > 0 {
				t.Errorf("log_file %q (%v), want no line", log, err)
			}
		})
	}
}

// tree lists every file and directory under dir, dot files too.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	if err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		names = append(names, path)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

// The agent never writes into its own network namespace (skel refuses
// the plugin's), whatever descriptor it is handed. The test runs itself
// again in a namespace of its own, so that a regression writes there,
// not into the machine's.
func TestAgentRunAddRefusesItsOwnNamespace(t *testing.T) {
	requireNFTLayout(t)
	if os.Getenv("AGENT_OWN_NETNS") == "" {
		cmd := exec.CommandContext(t.Context(), "unshare", "--net", os.Args[0], "-test.run=^TestAgentRunAddRefusesItsOwnNamespace$", "-test.v")
		cmd.Env = append(os.Environ(), "AGENT_OWN_NETNS=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a namespace of its own: %v\n%s", err, out)
		}
		return
	}
	f := newAgentFixture(t)
	f.meshed("u1")
	own, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	resp, _ := f.side.RunAdd(f.request("/proc/self/ns/net", "u1", prevV4), int(own.Fd()))
	if resp.Done || !strings.Contains(resp.HandBack, "own network namespace") {
		t.Errorf("answer %+v, want handed back", resp)
	}
	if got := saveIn(t, "/proc/self/ns/net", iptables.IPv4); strings.Contains(got, "ISTIO") {
		t.Errorf("rules written into the agent's own namespace:\n%s", got)
	}
}

// restoreIn writes a model with iptables-nft-restore into the namespace.
func restoreIn(t *testing.T, path string, m iptables.Model) {
	t.Helper()
	for _, rs := range m.Rulesets() {
		text, err := iptables.Plan(rs, nil)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), "nsenter", "--net="+path, xtables.CommandsFor(release.NFT, rs.Family).Restore, "--noflush")
		cmd.Stdin = bytes.NewReader(text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("restore: %v\n%s", err, out)
		}
	}
}

// A pod the plugin passes through is the agent's to finish: its result,
// its record of the sandbox, no rules.
func TestAgentRunAddPassesThrough(t *testing.T) {
	requireNFTLayout(t)
	f := newAgentFixture(t)
	plain := meshedPod(nil)
	plain.Metadata.UID = "u1"
	delete(plain.Metadata.Annotations, "sidecar.istio.io/status")
	plain.Spec.Containers = plain.Spec.Containers[:1]
	f.pods["team-a/web-1"] = plain
	fd, path := newNetns(t)
	resp, _ := f.side.RunAdd(f.request(path, "u1", prevV4), fd)
	if !resp.Done || !bytes.Contains(resp.Stderr, []byte(`"redirect":false`)) {
		t.Fatalf("answer %+v: want done, not redirected", resp)
	}
	if got := saveIn(t, path, iptables.IPv4); strings.Contains(got, "ISTIO") {
		t.Errorf("rules in a plain pod:\n%s", got)
	}
	recs, err := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}.ForPod("u1")
	if err != nil || len(recs) != 1 || !recs[0].Passed {
		t.Errorf("records %+v, %v: want the sandbox recorded as passed", recs, err)
	}
}

// The sandbox's record is written before the answer: a DEL the runtime
// sends once it has the answer removes it for good, whatever the agent
// does after (a record written late would outlive its sandbox).
func TestAgentRunAddRecordsBeforeTheAnswer(t *testing.T) {
	requireNFTLayout(t)
	f := newAgentFixture(t)
	f.meshed("u1")
	fd, path := newNetns(t)
	resp, after := f.side.RunAdd(f.request(path, "u1", prevV4), fd)
	if !resp.Done {
		t.Fatalf("handed back: %s", resp.HandBack)
	}
	store := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}
	if recs, _ := store.ForPod("u1"); len(recs) != 1 {
		t.Fatalf("records at the answer: %+v, want the sandbox's", recs)
	}
	if err := store.Remove("u1", "c-u1"); err != nil { // as the DEL that follows does
		t.Fatal(err)
	}
	after()
	if recs, _ := store.ForPod("u1"); len(recs) != 0 {
		t.Errorf("records after the DEL and the agent's work after the answer: %+v, want none", recs)
	}
}

// A namespace with a global IPv6 address the primary did not report needs
// IPv6 rules: read in the namespace before anything is written, so an
// agent told IPv6 is not over netlink hands back having written nothing,
// and one told it is writes both families.
func TestAgentRunAddReadsTheNamespacesIPv6(t *testing.T) {
	requireNFTLayout(t)
	for _, v6 := range []bool{false, true} {
		f := newAgentFixture(t)
		f.meshed("u1")
		fd, path := newNetns(t)
		if err := ns.WithNetNSPath(path, func(ns.NetNS) error {
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(lo); err != nil {
				return err
			}
			return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8::7"), Mask: net.CIDRMask(128, 128)}})
		}); err != nil {
			t.Fatal(err)
		}
		req := f.request(path, "u1", prevV4)
		if !v6 {
			req.Netlink = []string{"ipv4"}
		}
		resp, _ := f.side.RunAdd(req, fd)
		v4Rules, v6Rules := strings.Contains(saveIn(t, path, iptables.IPv4), "ISTIO"), strings.Contains(saveIn(t, path, iptables.IPv6), "ISTIO")
		switch {
		case !v6 && (resp.Done || !strings.Contains(resp.HandBack, "ipv6") || v4Rules || v6Rules):
			t.Errorf("IPv6 not over netlink: %+v, IPv4 rules %v, IPv6 rules %v; want a hand-back naming ipv6 and nothing written", resp, v4Rules, v6Rules)
		case v6 && (!resp.Done || !v4Rules || !v6Rules):
			t.Errorf("IPv6 over netlink: %+v, IPv4 rules %v, IPv6 rules %v; want both families", resp, v4Rules, v6Rules)
		}
	}
}

// The agent's write carries the shim's deadline down to each batch, so a
// deadline that passes after mayWrite still stops the transaction
// (xtables TestApplyNoTransactionPastTheDeadline), and only netlink writes;
// it is trusted, for iptables and native nftables alike.
func TestAgentWriteCarriesTheDeadline(t *testing.T) {
	deadline := time.Now().Add(time.Second)
	layout, _ := nfnl.LayoutOf("1.8.9")
	r := &agentRun{req: handoff.Request{Deadline: deadline.UnixNano()}, netlink: map[iptables.Family]nfnl.Layout{iptables.IPv4: layout}}
	w, err := r.write(nil, plan{v4: true}, true)
	if err != nil || !w.Deadline.Equal(time.Unix(0, deadline.UnixNano())) || !w.Only || !w.Trusted || len(w.Netlink) != 1 || w.Netlink[iptables.IPv4] != layout {
		t.Errorf("write = %+v, %v; want netlink only, in 1.8.9's layout, trusted, until the shim's deadline", w, err)
	}
	if _, err := r.write(nil, plan{v4: true}, false); !errors.Is(err, errHandBack) {
		t.Errorf("an untrusted write: %v, want a hand-back", err)
	}
	// Native nftables: trusted too, so its read-back is the audit's.
	native := &agentRun{req: r.req, native: true}
	if w, err := native.write(nil, plan{v4: true}, true); err != nil || !w.Deadline.Equal(time.Unix(0, deadline.UnixNano())) || !w.Only || !w.Trusted || len(w.Netlink) != 0 || len(w.Legacy) != 0 {
		t.Errorf("native write = %+v, %v; want native only, trusted, until the shim's deadline", w, err)
	}
}

// With native_nftables the agent runs the ADD whatever the node's
// iptables (the request names no family): upstream's native ruleset goes
// in over netlink, and the record says so (version 2), so the audit
// reads it back as nftables.
func TestAgentRunAddNativeNftables(t *testing.T) {
	f := newAgentFixture(t)
	f.meshed("u1")
	for _, prev := range []string{prevV4, prevDual} {
		fd, path := newNetns(t)
		req := f.request(path, "u1", prev)
		req.Stdin = bytes.Replace(req.Stdin, []byte(`"iptables_backend":"nft"`), []byte(`"native_nftables":true`), 1)
		req.Netlink, req.Release = nil, ""
		resp, after := f.side.RunAdd(req, fd)
		if !resp.Done {
			t.Fatalf("handed back: %s", resp.HandBack)
		}
		after()
		if !bytes.Contains(resp.Stderr, []byte(`"ran_in":"agent"`)) || !bytes.Contains(resp.Stderr, []byte(`"rules_by":"nftables"`)) {
			t.Errorf("log line %s, want ran_in agent and rules_by nftables", resp.Stderr)
		}
		rec, err := applied.Store{Dir: filepath.Join(f.run, "sandboxes")}.ForPod("u1")
		if err != nil || len(rec) == 0 || !rec[len(rec)-1].Native || rec[len(rec)-1].Version != 2 || rec[len(rec)-1].Backend != "" {
			t.Fatalf("records %+v, %v: want one native, version 2, no iptables backend", rec, err)
		}
		m, _ := rec[len(rec)-1].Model()
		diffs, err := (&podnet.Network{Native: true}).Check(t.Context(), path, m)
		if err != nil || len(diffs) > 0 {
			t.Errorf("the native rules read back: %v, %v", diffs, err)
		}
		if got := saveIn(t, path, iptables.IPv4); strings.Contains(got, "ISTIO_") {
			t.Errorf("iptables rules in a native pod:\n%s", got)
		}
		_ = os.Remove(filepath.Join(f.run, "sandboxes", "u1", "c-u1.json"))
	}
}
