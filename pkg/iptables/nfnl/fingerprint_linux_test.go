package nfnl_test

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/iptablestest"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
)

func fingerprint(t *testing.T, n ns.NetNS, f iptables.Family) nfnl.Fingerprint {
	t.Helper()
	var fp nfnl.Fingerprint
	if err := n.Do(func(ns.NetNS) (err error) {
		fp, _, err = nfnl.ReadFingerprint(f)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return fp
}

// ipt runs one iptables-nft command of a family in the namespace.
func ipt(t *testing.T, n ns.NetNS, f iptables.Family, args ...string) {
	t.Helper()
	name := "iptables-nft"
	if f == iptables.IPv6 {
		name = "ip6tables-nft"
	}
	if err := n.Do(func(ns.NetNS) error {
		_, err := xtables.ExecRunner{}.Run(t.Context(), nil, name, args...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func saveWithCounters(t *testing.T, n ns.NetNS) string {
	t.Helper()
	var out []byte
	if err := n.Do(func(ns.NetNS) (err error) {
		out, err = xtables.ExecRunner{}.Run(t.Context(), nil, "iptables-nft-save", "-c")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return withoutComments(out)
}

// The fingerprint holds every part of a namespace a check of the model
// reads, and nothing a check ignores.
func TestFingerprintChangesWithWhatACheckReads(t *testing.T) {
	v4 := iptables.IPv4
	for name, mutate := range map[string][]string{
		"a rule of our chain removed":        {"-t", "nat", "-D", "ISTIO_INBOUND", "1"},
		"a rule appended to our chain":       {"-t", "nat", "-A", "ISTIO_OUTPUT", "-j", "RETURN"},
		"our jump removed from a base chain": {"-t", "nat", "-D", "PREROUTING", "-p", "tcp", "-j", "ISTIO_INBOUND"},
		// iptables-save prints a table only if all of it is iptables'.
		"another's rule in a table of ours":   {"-t", "nat", "-I", "PREROUTING", "-p", "udp", "--dport", "53", "-j", "ACCEPT"},
		"another's chain in a table of ours":  {"-t", "nat", "-N", "CNI-HOSTPORT-DNAT"},
		"a second jump into our chain":        {"-t", "nat", "-I", "OUTPUT", "-p", "udp", "-j", "ISTIO_OUTPUT"},
		"a tagged rule in a base chain":       {"-t", "nat", "-A", "PREROUTING", "-i", "eth9", "-m", "comment", "--comment", iptables.RuleTag, "-j", "RETURN"},
		"a chain of ours in another table":    {"-t", "mangle", "-N", "ISTIO_DIVERT"},
		"a jump into ours from another chain": {"-t", "nat", "-N", "FOREIGN"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNS(t)
			rs := iptables.BuildFamily(iptables.DefaultSpec(), v4)
			restore(t, n, &rs, machine)
			before := fingerprint(t, n, v4)
			ipt(t, n, v4, mutate...)
			if name == "a jump into ours from another chain" {
				ipt(t, n, v4, "-t", "nat", "-A", "FOREIGN", "-j", "ISTIO_REDIRECT")
			}
			if fingerprint(t, n, v4) == before {
				t.Error("the fingerprint did not change")
			}
		})
	}
}

func TestFingerprintIgnoresOthersAndCounters(t *testing.T) {
	v4 := iptables.IPv4
	n := newNS(t)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), v4)
	restore(t, n, &rs, machine)
	before, counted := fingerprint(t, n, v4), saveWithCounters(t, n)

	// Traffic through our chains moves their counters.
	if err := n.Do(func(ns.NetNS) error { return dialThroughRedirect() }); err != nil {
		t.Fatal(err)
	}
	if saveWithCounters(t, n) == counted {
		t.Fatal("the dial moved no counter: the test proves nothing")
	}
	// Others' rules and chains in tables holding nothing of ours; the
	// other family.
	ipt(t, n, v4, "-t", "filter", "-N", "CNI-FORWARD")
	ipt(t, n, v4, "-t", "filter", "-A", "CNI-FORWARD", "-p", "tcp", "--dport", "8080", "-j", "RETURN")
	ipt(t, n, v4, "-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
	ipt(t, n, v4, "-t", "mangle", "-A", "OUTPUT", "-j", "MARK", "--set-mark", "7")
	v6 := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv6)
	restore(t, n, &v6, machine)

	if fingerprint(t, n, v4) != before {
		t.Error("counters, others' tables or the other family changed the fingerprint")
	}
}

// A namespace holding nothing of ours has one fingerprint, whatever else
// it holds; and it is not a model's.
func TestFingerprintOfNothingOurs(t *testing.T) {
	v4 := iptables.IPv4
	empty, foreign, ours := newNS(t), newNS(t), newNS(t)
	ipt(t, foreign, v4, "-t", "nat", "-A", "PREROUTING", "-p", "udp", "-j", "ACCEPT")
	rs := iptables.BuildFamily(iptables.DefaultSpec(), v4)
	restore(t, ours, &rs, machine)
	if fingerprint(t, empty, v4) != fingerprint(t, foreign, v4) {
		t.Error("a foreign rule changed the fingerprint of nothing ours")
	}
	if fingerprint(t, empty, v4) == fingerprint(t, ours, v4) {
		t.Error("our rules have the fingerprint of nothing")
	}
}

// BenchmarkReadFingerprint is the audit's read of one family of a pod
// holding the default rules, beside the iptables-save it replaces.
func BenchmarkReadFingerprint(b *testing.B) {
	n := newNS(b)
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	layout, _ := nfnl.LayoutOf("1.8.9")
	if err := write(n, &rs, layout); err != nil {
		b.Fatal(err)
	}
	iptablestest.BenchReads(b, n, map[string]func() error{
		"fingerprint": func() error { _, _, err := nfnl.ReadFingerprint(iptables.IPv4); return err },
		"iptables-save": func() error {
			_, err := xtables.ExecRunner{}.Run(b.Context(), nil, "iptables-nft-save")
			return err
		},
	})
}
