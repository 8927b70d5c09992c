package xtables

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// fakeRunner records what would run and answers iptables-save from a
// scripted list of states.
type fakeRunner struct {
	calls []string
	saves []string // successive iptables-save outputs
	fail  error    // returned by every restore
}

func (f *fakeRunner) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	base := filepath.Base(name)
	f.calls = append(f.calls, base+" "+strings.Join(args, " "))
	if strings.HasSuffix(base, "-save") {
		if len(f.saves) == 0 {
			return nil, errors.New("no scripted state")
		}
		out := f.saves[0]
		if len(f.saves) > 1 {
			f.saves = f.saves[1:]
		}
		return []byte(out), nil
	}
	_ = stdin
	return nil, f.fail
}

// saveOf renders what iptables-save prints for a ruleset.
func saveOf(rs *iptables.Ruleset, extraPrerouting ...string) string {
	var b strings.Builder
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	for _, c := range rs.Chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
	}
	for _, r := range rs.Rules {
		fmt.Fprintf(&b, "-A %s %s\n", r.Chain, r.Args())
	}
	for _, r := range extraPrerouting {
		fmt.Fprintf(&b, "-A PREROUTING %s\n", r)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func TestApplyFreshNamespaceIsOneRestoreOneSave(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{saves: []string{saveOf(&rs)}}
	p := &Programmer{Runner: f, Backend: release.NFT}
	if _, err := p.Apply(context.Background(), &rs, Write{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"iptables-nft-restore --noflush --wait=10", "iptables-nft-save "}
	if strings.Join(f.calls, "|") != strings.Join(want, "|") {
		t.Errorf("ran %q, want %q", f.calls, want)
	}
}

// BackendIPv6 sends IPv6's writes and reads to its backend, IPv4's to
// Backend: a sandbox whose families went to two (applied.Writer), as the
// audit repairs it; WithBackend, which looks in one, drops it.
func TestBackendIPv6(t *testing.T) {
	for _, tc := range []struct {
		f    iptables.Family
		want []string
	}{
		{iptables.IPv4, []string{"iptables-nft-restore --noflush --wait=10", "iptables-nft-save "}},
		{iptables.IPv6, []string{"ip6tables-legacy-restore --noflush --wait=10", "ip6tables-legacy-save "}},
	} {
		rs := iptables.BuildFamily(iptables.DefaultSpec(), tc.f)
		f := &fakeRunner{saves: []string{saveOf(&rs)}}
		p := &Programmer{Runner: f, Backend: release.NFT, BackendIPv6: release.Legacy}
		if _, err := p.Apply(context.Background(), &rs, Write{}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(f.calls, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: ran %q, want %q", tc.f, f.calls, tc.want)
		}
	}
	f := &fakeRunner{saves: []string{""}}
	if _, err := (&Programmer{Runner: f, Backend: release.NFT, BackendIPv6: release.Legacy}).WithBackend(release.NFT).Read(context.Background(), iptables.IPv6); err != nil {
		t.Fatal(err)
	}
	if want := "ip6tables-nft-save "; len(f.calls) != 1 || f.calls[0] != want {
		t.Errorf("WithBackend(nft) read IPv6 with %q, want %q", f.calls, want)
	}
}

// Write.Trusted: a successful restore is the answer (one exec); a failed
// one still reads back and reconciles, as without it.
func TestApplyTrusted(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{}
	p := &Programmer{Runner: f, Backend: release.NFT}
	if _, err := p.Apply(context.Background(), &rs, Write{Trusted: true}); err != nil {
		t.Fatal(err)
	}
	if want := "iptables-nft-restore --noflush --wait=10"; strings.Join(f.calls, "|") != want {
		t.Errorf("ran %q, want only %q", f.calls, want)
	}
	f = &fakeRunner{saves: []string{saveOf(&rs)}, fail: errors.New("exit status 1")}
	p.Runner = f
	_, err := p.Apply(context.Background(), &rs, Write{Trusted: true})
	if err == nil || len(f.calls) < 2 || !strings.HasPrefix(f.calls[1], "iptables-nft-save") {
		t.Errorf("a failed restore: %v after %q, want it read back", err, f.calls)
	}
}

func TestApplyReconcilesARepeatedAdd(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	// After the first restore the jump into ISTIO_INBOUND is there twice.
	dup := saveOf(&rs, "-p tcp -j ISTIO_INBOUND")
	f := &fakeRunner{saves: []string{dup, saveOf(&rs)}}
	p := &Programmer{Runner: f, Backend: release.Legacy}
	if _, err := p.Apply(context.Background(), &rs, Write{}); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 4 || !strings.HasPrefix(f.calls[2], "iptables-legacy-restore") {
		t.Errorf("ran %q, want restore, save, reconciling restore, save", f.calls)
	}
}

func TestApplyReportsWhatDiffers(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv6)
	empty := "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"
	f := &fakeRunner{saves: []string{empty}}
	_, err := (&Programmer{Runner: f, Backend: release.Auto}).Apply(context.Background(), &rs, Write{})
	if err == nil || !strings.Contains(err.Error(), "ipv6 rules differ") || !strings.Contains(err.Error(), "chain missing") {
		t.Fatalf("Apply = %v, want the differences", err)
	}
	if f.calls[0] != "ip6tables-restore --noflush --wait=10" {
		t.Errorf("auto must use the node's ip6tables-restore, ran %q", f.calls[0])
	}
}

func TestApplyKeepsTheRestoreError(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{saves: []string{"*nat\nCOMMIT\n"}, fail: errors.New("iptables-restore: line 3 failed")}
	_, err := (&Programmer{Runner: f, Backend: release.Auto}).Apply(context.Background(), &rs, Write{})
	if err == nil || !strings.Contains(err.Error(), "line 3 failed") {
		t.Fatalf("Apply = %v, want the restore's error", err)
	}
}

func TestCleanupOfACleanNamespaceRunsNoRestore(t *testing.T) {
	f := &fakeRunner{saves: []string{"*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p udp -j FOREIGN\nCOMMIT\n"}}
	if err := (&Programmer{Runner: f, Backend: release.Auto}).Cleanup(context.Background(), iptables.IPv4, iptables.IPv6); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.calls {
		if strings.Contains(c, "restore") {
			t.Errorf("ran %q in a namespace with nothing of ours", c)
		}
	}
}

func TestParseBackend(t *testing.T) {
	for in, want := range map[string]release.Backend{"": release.Auto, "auto": release.Auto, "legacy": release.Legacy, "nft": release.NFT} {
		if got, err := release.ParseBackend(in); err != nil || got != want {
			t.Errorf("release.ParseBackend(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := release.ParseBackend("ebpf"); err == nil || !strings.Contains(err.Error(), release.Backends) {
		t.Errorf("release.ParseBackend(ebpf) = %v, want the allowed values", err)
	}
}

// layoutOf is release v's layout, which nfnl must know.
func layoutOf(t testing.TB, v string) nfnl.Layout {
	t.Helper()
	l, ok := nfnl.LayoutOf(v)
	if !ok {
		t.Fatalf("nfnl lays out no rules as iptables %s writes them", v)
	}
	return l
}

// v4 asks for the IPv4 rules' first write over netlink, laid out as
// iptables 1.8.9 writes them.
var v4 = func() map[iptables.Family]nfnl.Layout {
	l, _ := nfnl.LayoutOf("1.8.9")
	return map[iptables.Family]nfnl.Layout{iptables.IPv4: l}
}()

// The netlink writer replaces the first restore only: with Trusted its
// success is the answer, without it the rules are read back; when it
// fails, iptables-restore writes and Written says why. A family the
// Write does not name is restored. The transaction lays the rules out as
// the Write says the family's release does.
func TestApplyNetlinkFirst(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	wrote := 0
	var laidOut []string
	ok := func(_ *iptables.Ruleset, l nfnl.Layout) error {
		wrote++
		laidOut = append(laidOut, l.Release())
		return nil
	}

	f := &fakeRunner{}
	p := &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
	if w, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: v4}); err != nil || !w.Netlink || wrote != 1 || len(f.calls) != 0 {
		t.Errorf("trusted: %+v, err %v, %d netlink writes, ran %q; want one write and nothing run", w, err, wrote, f.calls)
	}
	if strings.Join(laidOut, " ") != "1.8.9" {
		t.Errorf("trusted: laid out as %q, want 1.8.9 as the Write says", laidOut)
	}
	for _, v := range []string{"1.8.7", "1.8.11"} {
		laidOut, wrote = nil, 0
		f = &fakeRunner{}
		p = &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
		netlink := map[iptables.Family]nfnl.Layout{iptables.IPv4: layoutOf(t, v)}
		if w, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: netlink}); err != nil || !w.Netlink || strings.Join(laidOut, " ") != v || len(f.calls) != 0 {
			t.Errorf("iptables %s: %+v, err %v, laid out as %q, ran %q; want one write laid out as %s", v, w, err, laidOut, f.calls, v)
		}
	}
	wrote = 0

	f = &fakeRunner{saves: []string{saveOf(&rs)}}
	p = &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
	if _, err := p.Apply(context.Background(), &rs, Write{Netlink: v4}); err != nil || strings.Join(f.calls, "|") != "iptables-nft-save " {
		t.Errorf("untrusted: err %v, ran %q; want only the read-back", err, f.calls)
	}

	f = &fakeRunner{}
	p = &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
	wrote = 0
	v6only := map[iptables.Family]nfnl.Layout{iptables.IPv6: v4[iptables.IPv4]}
	if w, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: v6only}); err != nil || w.Netlink || wrote != 0 || strings.Join(f.calls, "|") != "iptables-nft-restore --noflush --wait=10" {
		t.Errorf("another family's netlink: %+v, err %v, %d netlink writes, ran %q; want iptables-restore only", w, err, wrote, f.calls)
	}

	refused := errors.New("nf_tables refused it")
	f = &fakeRunner{}
	p = &Programmer{Runner: f, Backend: release.NFT, Transaction: func(*iptables.Ruleset, nfnl.Layout) error { return refused }}
	w, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: v4})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.calls, "|") != "iptables-nft-restore --noflush --wait=10" || w.Netlink || !errors.Is(w.Refused, refused) {
		t.Errorf("refused: ran %q, wrote %+v; want iptables-restore and the refusal said", f.calls, w)
	}

	// A read-back that differs reconciles with iptables-restore, not netlink.
	wrote = 0
	f = &fakeRunner{saves: []string{saveOf(&rs, "-p tcp -j ISTIO_INBOUND"), saveOf(&rs)}}
	p = &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
	if _, err := p.Apply(context.Background(), &rs, Write{Netlink: v4}); err != nil || wrote != 1 || len(f.calls) != 3 || !strings.HasPrefix(f.calls[1], "iptables-nft-restore") {
		t.Errorf("reconcile: err %v, %d writes, ran %q; want save, restore, save", err, wrote, f.calls)
	}
}

// Write.Only: a batch not written is Apply's answer; nothing runs, so
// no iptables of the agent's container writes a node's pod. A family the
// Write does not name is not written either.
func TestApplyOnlyNetlink(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	for name, c := range map[string]struct {
		err     error
		netlink map[iptables.Family]nfnl.Layout
	}{
		"refused":        {errors.New("nf_tables refused it"), v4},
		"lost":           {fmt.Errorf("%w: recvfrom: no buffer space available", nfnl.ErrUnknownOutcome), v4},
		"not the family": {nil, map[iptables.Family]nfnl.Layout{iptables.IPv6: v4[iptables.IPv4]}},
	} {
		f := &fakeRunner{}
		p := &Programmer{Runner: f, Backend: release.NFT, Transaction: func(*iptables.Ruleset, nfnl.Layout) error { return c.err }}
		_, got := p.Apply(context.Background(), &rs, Write{Trusted: true, Only: true, Netlink: c.netlink})
		if !errors.Is(got, ErrNotWritten) || (c.err != nil && !errors.Is(got, c.err)) || len(f.calls) != 0 {
			t.Errorf("%s: %v, ran %q; want the batch's error and nothing run", name, got, f.calls)
		}
	}
}

// A transaction whose replies were lost may have been committed: Apply
// reads back and reconciles from what is there, even with Trusted,
// and never restores a fresh namespace's rules on top.
func TestApplyNetlinkUnknownOutcomeReadsBack(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	lost := func(*iptables.Ruleset, nfnl.Layout) error {
		return fmt.Errorf("%w: recvfrom: no buffer space available", nfnl.ErrUnknownOutcome)
	}
	// It was committed: the read-back finds the model.
	f := &fakeRunner{saves: []string{saveOf(&rs)}}
	p := &Programmer{Runner: f, Backend: release.NFT, Transaction: lost}
	if _, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: v4}); err != nil || strings.Join(f.calls, "|") != "iptables-nft-save " {
		t.Errorf("committed: err %v, ran %q; want only the read-back", err, f.calls)
	}
	// It was not: the read-back finds nothing, and a reconcile writes.
	f = &fakeRunner{saves: []string{"*nat\nCOMMIT\n", saveOf(&rs)}}
	p = &Programmer{Runner: f, Backend: release.NFT, Transaction: lost}
	if _, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Netlink: v4}); err != nil || len(f.calls) != 3 || !strings.HasPrefix(f.calls[1], "iptables-nft-restore") {
		t.Errorf("not committed: err %v, ran %q; want save, restore, save", err, f.calls)
	}
}

// A ruleset Plan refuses to render is written neither way: its tokens are
// checked before the netlink write too, whose text iptables-save would
// print (a chain named "X;reboot\n-A FOO" forges a line). Nothing runs.
func TestApplyWritesNothingPlanRefuses(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	rs.Rules[0].Chain = "ISTIO_INBOUND;reboot"
	wrote := 0
	for name, transaction := range map[string]func(*iptables.Ruleset, nfnl.Layout) error{
		"no netlink":      nil,
		"netlink refused": func(*iptables.Ruleset, nfnl.Layout) error { return errors.New("nf_tables refused it") },
		"netlink writes":  func(*iptables.Ruleset, nfnl.Layout) error { wrote++; return nil },
	} {
		netlink := v4
		if transaction == nil {
			netlink = nil
		}
		for _, only := range []bool{false, true} {
			f := &fakeRunner{}
			p := &Programmer{Runner: f, Backend: release.NFT, Transaction: transaction}
			_, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Only: only && transaction != nil, Netlink: netlink})
			if err == nil || !strings.Contains(err.Error(), "unsafe token") || len(f.calls) != 0 || wrote != 0 {
				t.Errorf("%s (netlink only %v): %v, ran %q, %d netlink writes; want Plan's refusal and nothing written", name, only, err, f.calls, wrote)
			}
		}
	}
}

// A transaction never starts past the Write's deadline: with Only, the
// batch is not written and nothing runs (the agent hands the ADD back);
// without, no iptables-restore starts either (TestApplyRestoresOnlyBeforeTheDeadline).
func TestApplyNoTransactionPastTheDeadline(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	wrote := 0
	ok := func(*iptables.Ruleset, nfnl.Layout) error { wrote++; return nil }
	past := time.Now().Add(-time.Millisecond)
	f := &fakeRunner{}
	p := &Programmer{Runner: f, Backend: release.NFT, Transaction: ok}
	if _, err := p.Apply(context.Background(), &rs, Write{Netlink: v4, Only: true, Trusted: true, Deadline: past}); !errors.Is(err, ErrNotWritten) || !errors.Is(err, errLate) || wrote != 0 || len(f.calls) != 0 {
		t.Errorf("only netlink: %v, %d writes, ran %q; want nothing written", err, wrote, f.calls)
	}
	if w, err := p.Apply(context.Background(), &rs, Write{Netlink: v4, Trusted: true, Deadline: past}); !errors.Is(err, errLate) || w.Netlink || !errors.Is(w.Refused, errLate) || wrote != 0 || len(f.calls) != 0 {
		t.Errorf("restore allowed: %+v, %v, %d writes, ran %q; want nothing written past the deadline", w, err, wrote, f.calls)
	}
	if w, err := p.Apply(context.Background(), &rs, Write{Netlink: v4, Only: true, Trusted: true, Deadline: time.Now().Add(time.Hour)}); err != nil || !w.Netlink || wrote != 1 {
		t.Errorf("before the deadline: %+v, %v, %d writes; want the transaction", w, err, wrote)
	}
}

// A Write with a deadline starts no restore past it (the node agent's on
// a legacy node, whose shim has stopped waiting); before it, the restore
// is the answer.
func TestApplyRestoresOnlyBeforeTheDeadline(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	f := &fakeRunner{}
	p := &Programmer{Runner: f, Backend: release.Legacy}
	if _, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Deadline: time.Now().Add(-time.Millisecond)}); !errors.Is(err, errLate) || len(f.calls) != 0 {
		t.Errorf("past the deadline: %v, ran %q; want errLate and nothing run", err, f.calls)
	}
	if _, err := p.Apply(context.Background(), &rs, Write{Trusted: true, Deadline: time.Now().Add(time.Hour)}); err != nil || len(f.calls) != 1 || !strings.HasPrefix(f.calls[0], "iptables-legacy-restore ") {
		t.Errorf("before the deadline: %v, ran %q; want one iptables-legacy-restore", err, f.calls)
	}
}

// Write.Legacy: the x_tables replace is the first write, bounded by the
// deadline; a table found not fresh, or a put back that failed, is read
// back and reconciled, never restored on top of; any other refusal
// restores; with Only, nothing runs.
func TestApplyLegacyReplaces(t *testing.T) {
	rs := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv4)
	deadline := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name      string
		refused   error
		w         Write
		saves     []string
		wantCalls []string
		wantErr   error
	}{
		{name: "written", w: Write{Trusted: true, Deadline: deadline}},
		{name: "not fresh, the rules there", refused: fmt.Errorf("ipv4 nat table: %w", legacy.ErrNotFresh), w: Write{Trusted: true, Deadline: deadline},
			saves: []string{saveOf(&rs)}, wantCalls: []string{"iptables-legacy-save "}},
		{name: "not fresh, a jump twice", refused: fmt.Errorf("ipv4 nat table: %w", legacy.ErrNotFresh), w: Write{Trusted: true, Deadline: deadline},
			saves:     []string{saveOf(&rs, "-p tcp -j ISTIO_INBOUND"), saveOf(&rs)},
			wantCalls: []string{"iptables-legacy-save ", "iptables-legacy-restore --noflush --wait=10", "iptables-legacy-save "}},
		{name: "partial", refused: fmt.Errorf("putting the nat table back: %w", legacy.ErrPartial), w: Write{Trusted: true, Deadline: deadline},
			saves: []string{saveOf(&rs)}, wantCalls: []string{"iptables-legacy-save "}},
		{name: "refused", refused: errors.New("EAGAIN"), w: Write{Trusted: true, Deadline: deadline},
			wantCalls: []string{"iptables-legacy-restore --noflush --wait=10"}},
		{name: "refused, only", refused: errors.New("EAGAIN"), w: Write{Only: true, Trusted: true, Deadline: deadline}, wantErr: ErrNotWritten},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeRunner{saves: c.saves}
			var lockBy time.Time
			p := &Programmer{Runner: f, Backend: release.Legacy, Replace: func(_ *iptables.Ruleset, by time.Time) error {
				lockBy = by
				return c.refused
			}}
			c.w.Legacy = map[iptables.Family]bool{iptables.IPv4: true}
			written, err := p.Apply(context.Background(), &rs, c.w)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
				t.Fatalf("Apply: %v, want %v", err, c.wantErr)
			}
			if written.Replaced != (c.refused == nil) || !errors.Is(written.Refused, c.refused) {
				t.Errorf("written %+v", written)
			}
			if !lockBy.Equal(deadline) {
				t.Errorf("the lock waited until %v, want the deadline %v", lockBy, deadline)
			}
			if strings.Join(f.calls, "|") != strings.Join(c.wantCalls, "|") {
				t.Errorf("ran %q, want %q", f.calls, c.wantCalls)
			}
		})
	}
	// Past the deadline, no reconciling restore either.
	f := &fakeRunner{saves: []string{saveOf(&rs, "-p tcp -j ISTIO_INBOUND")}}
	p := &Programmer{Runner: f, Backend: release.Legacy, Replace: func(*iptables.Ruleset, time.Time) error {
		return legacy.ErrNotFresh
	}}
	w := Write{Legacy: map[iptables.Family]bool{iptables.IPv4: true}, Trusted: true, Deadline: time.Now().Add(50 * time.Millisecond)}
	p.Runner = &slowSave{fakeRunner: f, until: w.Deadline}
	if _, err := p.Apply(context.Background(), &rs, w); !errors.Is(err, ErrLate) {
		t.Errorf("a reconcile past the deadline: %v, want ErrLate", err)
	}
	for _, c := range f.calls {
		if strings.Contains(c, "restore") {
			t.Errorf("ran %q past the deadline", c)
		}
	}
}

// slowSave's iptables-save returns only once until has passed.
type slowSave struct {
	*fakeRunner
	until time.Time
}

func (s *slowSave) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	if strings.HasSuffix(name, "-save") {
		time.Sleep(time.Until(s.until))
	}
	return s.fakeRunner.Run(ctx, stdin, name, args...)
}

// savesByName answers each save program with its own output or error.
type savesByName map[string]string

func (s savesByName) Run(_ context.Context, _ []byte, name string, _ ...string) ([]byte, error) {
	out, ok := s[filepath.Base(name)]
	if !ok {
		return nil, errors.New(name + ": failed")
	}
	return []byte(out), nil
}

// A family found in neither backend follows the other family's, but not
// into a backend whose read of it failed: the repair would write there,
// fail its read-back, and hold the pod's rules in a backend it cannot read.
func TestHoldingDoesNotFollowIntoAFailedRead(t *testing.T) {
	v6 := iptables.BuildFamily(iptables.DefaultSpec(), iptables.IPv6)
	p := &Programmer{Backend: release.NFT, Runner: savesByName{
		"iptables-nft-save":     "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n",
		"ip6tables-nft-save":    "*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n",
		"ip6tables-legacy-save": saveOf(&v6),
		// iptables-legacy-save fails
	}}
	found, also := p.Holding(context.Background(), iptables.Build(iptables.DefaultSpec(), true, true))
	if found.BackendFor(iptables.IPv4) != release.NFT || found.BackendFor(iptables.IPv6) != release.Legacy || len(also) != 0 {
		t.Errorf("IPv4 in %s, IPv6 in %s (also %v); want nft, legacy", found.BackendFor(iptables.IPv4), found.BackendFor(iptables.IPv6), also)
	}
}
