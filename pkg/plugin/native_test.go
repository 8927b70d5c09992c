package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/podnet"
)

// A DEL whose config does not validate keeps what it can read of it: a
// native_nftables of the wrong type costs only that key, not the
// records directory and the reports socket beside it.
func TestDelWithBadNativeValueKeepsTheRest(t *testing.T) {
	c := fallbackConfig([]byte(`{"native_nftables":"true","records_dir":"/r","reports_socket":"/s"}`))
	if c.RecordsDir != "/r" || c.ReportsSocket != "/s" || c.parsed.Native {
		t.Errorf("fallback config %+v (native %v): want records_dir and reports_socket kept, not native", c, c.parsed.Native)
	}
	if c := fallbackConfig([]byte(`{"native_nftables":true,"log_level":7}`)); !c.parsed.Native {
		t.Error("a valid native_nftables beside a bad key is lost")
	}
}

// CHECK and DEL read and remove a sandbox's rules as its ADD wrote them,
// whatever the node's entry says now (the setting was switched since).
func TestCheckAndDelFollowTheRecordsWriter(t *testing.T) {
	for _, recordedNative := range []bool{true, false} {
		dir := t.TempDir()
		entry := confWithRecords(dir)
		if !recordedNative {
			entry = strings.Replace(entry, `"records_dir"`, `"native_nftables":true,"records_dir"`, 1)
		}
		a := cmdArgs(entry, podArgsUID)
		a.Netns = t.TempDir()
		r := applied.Record{PodUID: "0d5e2f4c-aaaa-bbbb-cccc-444455556666", Pod: "team-a/web-1", Container: a.ContainerID,
			NetnsInode: netnsInode(a.Netns), IPv4: true, Spec: iptables.DefaultSpec(), Native: recordedNative}
		if err := (applied.Store{Dir: dir}).Write(r); err != nil {
			t.Fatal(err)
		}
		h := newHarness()
		var asked []bool
		h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork { asked = append(asked, w.Native); return h.net }
		if err := h.p.Check(a); err != nil {
			t.Fatalf("CHECK: %v", err)
		}
		if err := h.p.Del(a); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if len(asked) != 2 || asked[0] != recordedNative || asked[1] != recordedNative {
			t.Errorf("recorded native=%v: CHECK and DEL asked for native=%v", recordedNative, asked)
		}
	}
}

// CHECK and DEL read and remove an iptables sandbox's rules in the
// backend of each family its record names, whatever the entry's
// iptables_backend says now or the node's alternatives lead to: the
// audit and inspect read them there, and a CHECK reading elsewhere would
// call a pod whose rules are intact broken. A record naming no backend
// (one an older build wrote) is read as the node's programs lead, and
// where the rules are found (as the audit reads an unrecorded sandbox). A
// record before version 3 names one backend, both families', as the
// audit reads it.
func TestCheckAndDelReadTheRecordedBackends(t *testing.T) {
	type backends struct {
		v4, v6 release.Backend
		found  bool // read where found (podnet.Network.FindBackend)
	}
	// The node's programs lead to legacy (this machine's to nft): a
	// guess starts there, resolved, so that nft is the one to look in
	// too.
	bin := t.TempDir()
	multi := filepath.Join(bin, "xtables-legacy-multi")
	if err := os.WriteFile(multi, nil, 0o755); err != nil { // #nosec G306 -- found by name, never run
		t.Fatal(err)
	}
	for _, prog := range []string{"iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save"} {
		if err := os.Symlink(multi, filepath.Join(bin, prog)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	node := backends{release.Legacy, "", true}
	for _, tc := range []struct {
		entry    string // iptables_backend, "" for none
		recorded backends
		want     backends
	}{
		{"", backends{release.Legacy, "", false}, backends{release.Legacy, "", false}},
		{"nft", backends{release.Legacy, "", false}, backends{release.Legacy, "", false}},
		{"legacy", backends{release.Legacy, "", false}, backends{release.Legacy, "", false}},
		{"legacy", backends{release.NFT, release.Legacy, false}, backends{release.NFT, release.Legacy, false}},
		{"", backends{release.NFT, release.Legacy, false}, backends{release.NFT, release.Legacy, false}},
		{"legacy", backends{"", "", false}, backends{release.Legacy, "", true}},
		{"", backends{"", "", false}, node},
	} {
		dir := t.TempDir()
		entry := confWithRecords(dir)
		if tc.entry != "" {
			entry = strings.Replace(entry, `"records_dir"`, `"iptables_backend":"`+tc.entry+`","records_dir"`, 1)
		}
		a := cmdArgs(entry, podArgsUID)
		a.Netns = t.TempDir()
		r := applied.Record{PodUID: "0d5e2f4c-aaaa-bbbb-cccc-444455556666", Pod: "team-a/web-1", Container: a.ContainerID,
			NetnsInode: netnsInode(a.Netns), IPv4: true, IPv6: true, Spec: iptables.DefaultSpec(),
			Backend: tc.recorded.v4, BackendIPv6: tc.recorded.v6}
		if err := (applied.Store{Dir: dir}).Write(r); err != nil {
			t.Fatal(err)
		}
		h := newHarness()
		var got []backends
		h.p.deps.NewPodNetwork = func(w applied.Writer) PodNetwork {
			n := podNetwork(w).(*podnet.Network)
			got = append(got, backends{n.Programmer.Backend, n.Programmer.BackendIPv6, n.FindBackend})
			return h.net
		}
		if err := h.p.Check(a); err != nil {
			t.Fatalf("CHECK: %v", err)
		}
		if err := h.p.Del(a); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		if len(got) != 2 || got[0] != tc.want || got[1] != tc.want {
			t.Errorf("entry %q, recorded %v: CHECK and DEL read with %v; want %v", tc.entry, tc.recorded, got, tc.want)
		}
	}
}
