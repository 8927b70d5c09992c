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

func (f *fingerprints) confirmed() *Confirmed { return NewConfirmed(f.read, nil) }

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

// Without legacy.Holds, legacy rules are always read with
// iptables-legacy-save, and never fingerprinted over netlink.
func TestCheckOfLegacyRulesWithoutHoldsRunsIptablesSave(t *testing.T) {
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

// held answers legacy.Holds from scripted lists (the last of each
// repeats), and counts the reads.
type held struct {
	ok    []bool
	err   error
	reads int
}

func (h *held) holds(*iptables.Ruleset) ([32]byte, bool, error) {
	h.reads++
	return [32]byte{7}, next(&h.ok), h.err
}

// A legacy state holding exactly the ruleset is read with
// iptables-legacy-save once and confirmed; then, held again, it is not
// read again. A state held only before or after the save's read, or not
// at all, or a read that fails, or a save that prints other rules,
// confirms nothing.
func TestCheckOfAHeldLegacyState(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	for name, tc := range map[string]struct {
		saved     string
		ok        []bool
		err       error
		confirmed bool
	}{
		"held":                       {saved: saveOf(&rs), ok: []bool{true}, confirmed: true},
		"not held":                   {saved: saveOf(&rs), ok: []bool{false}},
		"held before the read only":  {saved: saveOf(&rs), ok: []bool{true, false}},
		"held after the read only":   {saved: saveOf(&rs), ok: []bool{false, true}},
		"a read that fails":          {saved: saveOf(&rs), ok: []bool{true}, err: errors.New("no socket")},
		"a save that prints another": {saved: "*nat\nCOMMIT\n", ok: []bool{true}},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeRunner{saves: []string{tc.saved}}
			h := &held{ok: tc.ok, err: tc.err}
			prints := &fingerprints{}
			p := &Programmer{Runner: f, Backend: release.Legacy, Confirmed: NewConfirmed(prints.read, h.holds)}
			first := check(t, p, rs)
			if confirmed := len(p.Confirmed.states) > 0; confirmed != tc.confirmed || saves(f) != 1 || prints.reads != 0 || h.reads == 0 {
				t.Fatalf("first check: confirmed %v after %d saves, %d netlink fingerprints, %d legacy reads; want confirmed %v after 1 save, no fingerprint",
					confirmed, saves(f), prints.reads, h.reads, tc.confirmed)
			}
			if !tc.confirmed {
				return
			}
			if second := check(t, p, rs); len(second) != len(first) || saves(f) != 1 {
				t.Errorf("second check of the held state: %v after %d saves in all, want %v after 1", second, saves(f), first)
			}
		})
	}
}

func TestConfirmedIsBounded(t *testing.T) {
	c := NewConfirmed((&fingerprints{}).read, nil)
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
