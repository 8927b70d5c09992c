package xtables

import (
	"errors"
	"strings"
	"testing"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// fingerprints answers Confirmed's reads from scripted lists of
// fingerprints and their generations (the last of each repeats), and
// counts them.
type fingerprints struct {
	next  []nfnl.Fingerprint
	gens  []uint32
	err   error
	reads int
}

func next[T any](l *[]T) T {
	var v T
	if len(*l) > 0 {
		v = (*l)[0]
	}
	if len(*l) > 1 {
		*l = (*l)[1:]
	}
	return v
}

func (f *fingerprints) read(iptables.Family) (nfnl.Fingerprint, uint32, error) {
	f.reads++
	if f.err != nil {
		return nfnl.Fingerprint{}, 0, f.err
	}
	return next(&f.next), next(&f.gens), nil
}

func (f *fingerprints) confirmed() *Confirmed { return NewConfirmed(f.read) }

func fp(b byte) nfnl.Fingerprint { return nfnl.Fingerprint{b} }

func saves(f *fakeRunner) int {
	n := 0
	for _, c := range f.calls {
		if strings.Contains(c, "-save") {
			n++
		}
	}
	return n
}

// check runs one Check of the default model's IPv4 rules.
func check(t *testing.T, p *Programmer, rs iptables.Ruleset) []string {
	t.Helper()
	diffs, err := p.Check(t.Context(), iptables.Model{V4: &rs})
	if err != nil {
		t.Fatal(err)
	}
	return diffs
}

func TestCheckReadsAConfirmedStateOverNetlinkOnly(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{saves: []string{saveOf(&rs)}}
	prints := &fingerprints{next: []nfnl.Fingerprint{fp(1)}}
	p := &Programmer{Runner: f, Backend: release.NFT, Confirmed: prints.confirmed()}

	if d := check(t, p, rs); len(d) > 0 || saves(f) != 1 {
		t.Fatalf("first check: diffs %v after %d saves, want none after 1", d, saves(f))
	}
	if d := check(t, p, rs); len(d) > 0 || saves(f) != 1 {
		t.Fatalf("a confirmed state: diffs %v after %d saves, want none after still 1", d, saves(f))
	}
	// Another state, though iptables-save prints it alike: read again.
	prints.next = []nfnl.Fingerprint{fp(2)}
	check(t, p, rs)
	if saves(f) != 2 {
		t.Errorf("an unconfirmed state ran %d saves in all, want 2", saves(f))
	}
	// Another model in a confirmed state: read again.
	other := iptables.BuildFamily(inbound8080(), iptables.IPv4)
	f.saves = []string{saveOf(&other)}
	check(t, p, other)
	if saves(f) != 3 {
		t.Errorf("another model ran %d saves in all, want 3", saves(f))
	}
}

func inbound8080() iptables.Spec {
	s := iptables.DefaultSpec()
	s.InboundPorts = iptables.Ports{List: []uint16{8080}}
	return s
}

func TestCheckConfirmsOnlyWhatIptablesSavePrintsAsTheModel(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	for name, tc := range map[string]struct {
		saved  string
		prints []nfnl.Fingerprint
		gens   []uint32
		err    error
	}{
		"a state that differs": {saved: "*nat\nCOMMIT\n", prints: []nfnl.Fingerprint{fp(1)}},
		// A commit between the fingerprint and the read's end, even one
		// that put the state back (same fingerprint), confirms nothing.
		"a commit during the read": {saved: saveOf(&rs), prints: []nfnl.Fingerprint{fp(1)}, gens: []uint32{1, 2}},
		// A table owned by a socket goes when it closes: no commit.
		"a change without a commit": {saved: saveOf(&rs), prints: []nfnl.Fingerprint{fp(1), fp(2), fp(1)}},
		"no fingerprint":            {saved: saveOf(&rs), err: errors.New("no socket")},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeRunner{saves: []string{tc.saved}}
			prints := &fingerprints{next: tc.prints, gens: tc.gens, err: tc.err}
			p := &Programmer{Runner: f, Backend: release.NFT, Confirmed: prints.confirmed()}
			first := check(t, p, rs)
			if second := check(t, p, rs); len(second) != len(first) {
				t.Errorf("second check: %v, first: %v", second, first)
			}
			if saves(f) != 2 {
				t.Errorf("ran %d saves, want 2: the first check confirmed the state", saves(f))
			}
		})
	}
}

func TestCheckOfLegacyRulesAlwaysRunsIptablesSave(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{saves: []string{saveOf(&rs)}}
	prints := &fingerprints{next: []nfnl.Fingerprint{fp(1)}}
	p := &Programmer{Runner: f, Backend: release.Legacy, Confirmed: prints.confirmed()}
	check(t, p, rs)
	check(t, p, rs)
	if saves(f) != 2 || prints.reads != 0 {
		t.Errorf("legacy: %d saves and %d fingerprints, want 2 and none", saves(f), prints.reads)
	}
}

func TestConfirmedIsBounded(t *testing.T) {
	c := NewConfirmed((&fingerprints{}).read)
	for i := range maxConfirmedModels + 1 {
		c.add(string(rune(i)), fp(1))
	}
	for i := range maxStatesPerModel + 1 {
		c.add("one", fp(byte(i)))
	}
	if len(c.states) > maxConfirmedModels || len(c.states["one"]) > maxStatesPerModel {
		t.Errorf("%d models, %d states of one", len(c.states), len(c.states["one"]))
	}
	if !c.known("one", fp(maxStatesPerModel)) {
		t.Error("the newest state was forgotten")
	}
}
