package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// upstream measures upstream istio-cni's plugin binary (given with
// -upstream; the bench never fetches one) the same way: the same meshed
// pod from the same API server, a fresh namespace per ADD, its rules
// checked after each timed ADD, beside the same floor; native: both with
// native_nftables (upstream's writes through the nft binary, which the
// node must have), beside nft -f.
func (b *bench) upstream(binary, dir string, conc int, native bool) error {
	runDir := filepath.Join(dir, "upstream-run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return err
	}
	// Upstream reads its kubeconfig from its run directory (newer
	// releases) or from the entry's kubernetes.kubeconfig (older).
	kc, err := os.ReadFile(b.kubeconfig)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(runDir, "istio-cni-kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	entry, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "istio-cni",
		"plugin_log_level": "info", "cni_agent_run_dir": runDir, "pod_namespace": "istio-system",
		"exclude_namespaces": []string{"kube-system"}, "native_nftables": native,
		"kubernetes": map[string]any{"kubeconfig": kubeconfig, "cni_bin_dir": filepath.Dir(binary), "exclude_namespaces": []string{"kube-system"}},
		"prevResult": json.RawMessage(prevV4),
	})
	if err != nil {
		return err
	}
	f, err := installedFloor(native)
	if err != nil {
		return err
	}
	backend := f.backend
	up := &bench{plugin: binary, n: b.n, cpus: b.cpus, uids: b.uids}
	fmt.Printf("\n## Upstream istio-cni's plugin (%s), the same pod, API server and floor (%s)\n\n", binary, f.node)
	fmt.Println("| measurement | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|")
	floor := func() (sample, error) { return f.run(false) }
	for _, m := range []struct {
		label string
		conc  int
		one   func() (sample, error)
	}{
		{"floor: bare " + f.name, 1, floor},
		{"upstream ADD meshed pod", 1, up.addAddressed(backend, entry, true, false)},
		{fmt.Sprintf("floor, %d at once", conc), conc, floor},
		{fmt.Sprintf("upstream ADD, %d at once", conc), conc, up.addAddressed(backend, entry, false, false)},
	} {
		s, err := collect(b.n, m.conc, m.one)
		if err != nil {
			return fmt.Errorf("%s: %w", m.label, err)
		}
		row(m.label, s)
	}
	s, err := collect(min(b.n, 50), 1, up.addAddressed(backend, entry, false, true))
	if err != nil {
		return err
	}
	fmt.Printf("\nUpstream plugin peak RSS over %d ADDs (GNU time, %%M): %.1f MB\n", len(s), peakMB(s))
	return nil
}

// addAddressed is addWith for upstream's plugin, which refuses a namespace
// without an address: the primary's eth0 is there first (a link with
// the prevResult's address, up; not timed). Backend "": its rules are
// native nftables, checked as the plugin reads its own.
func (b *bench) addAddressed(backend release.Backend, stdin []byte, check, rss bool) func() (sample, error) {
	return func() (sample, error) {
		return withNetns(func(n ns.NetNS) (sample, error) {
			if err := n.Do(func(ns.NetNS) error { return primaryLink("198.51.100.10/24") }); err != nil {
				return sample{}, err
			}
			s, err := b.execPlugin("ADD", "bench", n.Path(), stdin, rss)
			switch {
			case err != nil || !check:
			case backend == "":
				err = verifyNative(n)
			default:
				err = verify(n, backend, "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001")
			}
			return s, err
		})
	}
}

// primaryLink does what the primary CNI would have: eth0, addressed, up,
// and lo up.
func primaryLink(cidr string) error {
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return err
	}
	// A veth pair inside the namespace (this kernel has no dummy links).
	eth0 := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}
	if err := netlink.LinkAdd(eth0); err != nil {
		return err
	}
	if err := netlink.AddrAdd(eth0, addr); err != nil {
		return err
	}
	for _, name := range []string{"eth0", "peer0", "lo"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// verifyNative: the namespace holds upstream's native ruleset for the
// bench pod, as nfnl reads it.
func verifyNative(n ns.NetNS) error {
	rs := nftables.Build(iptables.DefaultSpec(), false)
	var diffs []string
	if err := n.Do(func(ns.NetNS) (err error) { diffs, err = nfnl.DiffNative(&rs); return err }); err != nil {
		return err
	}
	if len(diffs) > 0 {
		return fmt.Errorf("upstream's native rules differ from the model: %v", diffs)
	}
	return nil
}
