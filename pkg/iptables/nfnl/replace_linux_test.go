package nfnl_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

// Replace removes what iptables' Plan counts ours (our chains; a jump or goto
// into one, and a rule with our tag, from any chain not ours), writes the model,
// and keeps everything else: the namespace then reads as the model, and
// the rules not ours are where they were.
func TestReplaceRemovesWhatIsOursOnly(t *testing.T) {
	own := ownRelease(t)
	n := newNS(t)
	other := iptables.BuildFamily(iptablestest.Specs()["exclude-interfaces"], iptables.IPv4) // tagged rules in built-in chains
	restore(t, n, &other, own)
	const notOurs = "*nat\n:FOO - [0:0]\n" +
		"-A FOO -j ISTIO_OUTPUT\n" +
		"-A FOO -p icmp -g ISTIO_REDIRECT\n" +
		"-A FOO -p tcp -m comment --comment istio-cni -j RETURN\n" +
		"-A FOO -p udp -m comment --comment istio-cni-not -j RETURN\n" +
		"-A FOO -j RETURN\n" +
		"-A OUTPUT -d 192.0.2.1/32 -j FOO\n" +
		"COMMIT\n"
	if err := n.Do(func(ns.NetNS) error {
		_, err := own.run(t.Context(), []byte(notOurs), xtables.CommandsFor(release.NFT, iptables.IPv4).Restore, "--noflush")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	m := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := n.Do(func(ns.NetNS) error { return nfnl.Replace(&m, own.layout) }); err != nil {
		t.Fatal(err)
	}
	var obs *iptables.Observed
	if err := n.Do(func(ns.NetNS) (err error) {
		obs, err = (&xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.NFT}).Read(t.Context(), iptables.IPv4)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if d := iptables.Diff(&m, obs); len(d) > 0 {
		t.Errorf("after Replace the namespace is not the model: %q", d)
	}
	nat := obs.Tables[iptables.TableNat]
	if want := []string{"-p udp -m comment --comment istio-cni-not -j RETURN", "-j RETURN"}; !slices.Equal(nat.Rules["FOO"], want) {
		t.Errorf("FOO holds %q, want %q", nat.Rules["FOO"], want)
	}
	if out := nat.Rules[iptables.Output]; len(out) == 0 || out[0] != "-d 192.0.2.1/32 -j FOO" {
		t.Errorf("nat OUTPUT holds %q, want the rule not ours first", out)
	}
}

// Replace into a namespace that holds nothing of ours is Write: the same
// rules, expression by expression.
func TestReplaceOfNothingIsWrite(t *testing.T) {
	own := ownRelease(t)
	for _, rs := range iptables.Build(iptablestest.Specs()["tproxy"], true, true).Rulesets() {
		t.Run(rs.Family.String(), func(t *testing.T) {
			byWrite, byReplace := newNS(t), newNS(t)
			if err := write(byWrite, rs, own.layout); err != nil {
				t.Fatal(err)
			}
			if err := byReplace.Do(func(ns.NetNS) error { return nfnl.Replace(rs, own.layout) }); err != nil {
				t.Fatal(err)
			}
			if w, r := read(t, byWrite, rs.Family, own), read(t, byReplace, rs.Family, own); w != r {
				t.Errorf("Replace wrote other rules than Write:\n%s", lineDiff(r.kernel, w.kernel))
			}
		})
	}
}

// A regular chain with a built-in chain's name (made with nft) is not
// taken for the built-in one: the kernel refuses the transaction that
// declares the hook, and Replace writes nothing into a chain no packet
// passes through.
func TestReplaceRefusesARegularChainNamedAsABuiltIn(t *testing.T) {
	own := ownRelease(t)
	n := newNS(t)
	nft(t, n, "add", "table", "ip", "nat")
	nft(t, n, "add", "chain", "ip", "nat", "OUTPUT")
	m := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	if err := n.Do(func(ns.NetNS) error { return nfnl.Replace(&m, own.layout) }); err == nil {
		t.Fatal("Replace wrote into a regular chain named OUTPUT")
	}
	if out := nft(t, n, "list", "table", "ip", "nat"); strings.Contains(out, "ISTIO") {
		t.Errorf("after the refusal nat holds:\n%s", out)
	}
}
