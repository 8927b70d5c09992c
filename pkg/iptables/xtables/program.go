package xtables

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/legacy"
	"istio-cni.local/istio-cni/pkg/iptables/nfnl"
	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// LockWaitSeconds bounds the wait for the xtables lock that iptables-legacy
// shares node-wide (in a hostUsers: false pod's user namespace, the pod's
// own: userNSLock); the caller's context bounds the whole operation.
const LockWaitSeconds = 10

// Programmer applies, verifies and removes rule models in the current
// network namespace. It holds what lasts across calls; how one ADD writes
// is the Write its caller passes.
type Programmer struct {
	Runner  Runner
	Backend release.Backend
	// BackendIPv6, when set, is IPv6's in place of Backend: a sandbox
	// whose families went to different backends (applied.Writer).
	BackendIPv6 release.Backend
	// Transaction writes a ruleset in one nf_tables transaction, laid
	// out as an iptables release does; nil is nfnl.Write. It is the
	// netlink seam, as Runner is the exec one.
	Transaction func(*iptables.Ruleset, nfnl.Layout) error
	// Replacement is Transaction for a Write that replaces (Write.
	// Replace); nil is nfnl.Replace.
	Replacement func(*iptables.Ruleset, nfnl.Layout) error
	// Replace writes a ruleset's tables into x_tables, laid out as
	// iptables-legacy-restore does, waiting for the xtables lock until
	// the time given; nil is legacy.Write. It is the x_tables seam.
	Replace func(*iptables.Ruleset, time.Time) error
	// Confirmed, if set, lets Check skip iptables-save for a family whose
	// nf_tables state (or legacy tables holding exactly the ruleset) it
	// has seen iptables-save print as the ruleset.
	Confirmed *Confirmed
	// restorer runs iptables-restore where it is not Runner: in the
	// user namespace that owns the network namespace (InUserNS).
	restorer Runner
}

// Write is how Apply first writes a ruleset, chosen once per ADD or
// repair by the caller: into a namespace that holds none of its chains,
// or, with Replace, over whatever of ours it holds. The zero Write
// restores and reads back, as every reconcile does.
type Write struct {
	// Netlink: the families whose first write is one nf_tables
	// transaction (nfnl.Write) in place of iptables-restore, each laid
	// out as the family's iptables release on the node writes it; the
	// caller found each writable so (NetlinkWritable). When the
	// transaction fails, iptables-restore writes instead; when its
	// outcome is unknown, Apply reads back and reconciles.
	Netlink map[iptables.Family]nfnl.Layout
	// Replace makes the Netlink families' transaction replace whatever
	// of ours the family holds (nfnl.Replace); without it, the
	// transaction is for a namespace that holds none. It is the audit's
	// repair of a running pod: in the node's own layout, and with no
	// moment between removing and writing.
	Replace bool
	// Legacy: the families whose first write is one x_tables replace
	// per table (legacy.Write) in place of iptables-legacy-restore; the
	// caller found them legacy. A refusal restores instead (unless
	// Only); tables found not fresh are read back and reconciled.
	Legacy map[iptables.Family]bool
	// Only makes a ruleset that the process did not write itself (over
	// netlink, or as x_tables replaces) Apply's answer: no
	// iptables-restore, no read-back. The node agent writes so for the
	// plugin's shim: its container's iptables need not be the node's, so
	// it hands anything it cannot write itself back to the plugin.
	Only bool
	// Deadline, if set, is when the caller stops waiting: no first
	// write (transaction or restore) starts after it. The node agent
	// sets the shim's: by then the plugin runs the ADD, and the agent
	// must write nothing more.
	Deadline time.Time
	// Trusted skips the read-back after a successful first write:
	// iptables-restore commits each table atomically, so success means
	// the rules are in; whether they are exactly the model is then the
	// node agent's audit to check, off the pod's start-up path.
	Trusted bool
}

// Written is how Apply first wrote a family's rules.
type Written struct {
	// Netlink: one nf_tables transaction wrote them; Replaced: x_tables
	// replaces did; else iptables-restore.
	Netlink, Replaced bool
	// Refused is why the write Write asked for did not go in
	// (iptables-restore wrote instead), or nil.
	Refused error
}

// byKernel says whether the process wrote the rules itself, not
// iptables-restore.
func (w Written) byKernel() bool { return w.Netlink || w.Replaced }

// ErrNotWritten: with Write.Only, the batch was refused, not encodable,
// declined, or its outcome is unknown.
var ErrNotWritten = errors.New("the process writes only by itself here")

// Apply makes the namespace hold one family's rules and verifies them by
// reading them back. The first attempt assumes a fresh namespace (one
// restore, or one netlink transaction, then one save); if the read-back
// differs (a repeated ADD, leftovers) it reconciles from what it read. The
// error says what still differs; removing what was programmed is the
// caller's choice (see Cleanup). How the first attempt writes, and whether
// it reads back, is w's.
func (p *Programmer) Apply(ctx context.Context, rs *iptables.Ruleset, w Write) (Written, error) {
	var observed *iptables.Observed // nil: a fresh namespace
	var written Written
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		// Rendered before anything is written, either way: its check of
		// every token keeps a value iptables-save would print as another
		// line out of the netlink write too.
		text, err := iptables.Plan(rs, observed)
		if err != nil {
			return written, err
		}
		var restoreErr error
		if attempt > 0 {
			if w.Late() {
				return written, fmt.Errorf("%s rules not reconciled: %w", rs.Family, errLate)
			}
			restoreErr = p.restore(ctx, rs.Family, text)
		} else if written = p.fresh(rs, w); !written.byKernel() {
			if w.Only {
				how := "over netlink"
				if _, ok := w.Netlink[rs.Family]; !ok && w.Legacy[rs.Family] {
					how = "as x_tables replaces"
				}
				return written, fmt.Errorf("%s rules not written %s: %w", rs.Family, how, errors.Join(written.Refused, ErrNotWritten))
			}
			// Whether a lost transaction was committed, or a table
			// put back, is unknown, and a namespace found not fresh
			// holds rules already: read back and reconcile, never
			// restore a fresh namespace's rules on top.
			restoreErr = written.Refused
			if !unknownOutcome(restoreErr) && !notFresh(written, w) {
				if w.Late() {
					return written, fmt.Errorf("%s rules not written: %w", rs.Family, errLate)
				}
				restoreErr = p.restore(ctx, rs.Family, text)
			}
		}
		if restoreErr == nil && w.Trusted && attempt == 0 {
			return written, nil
		}
		if observed, err = p.Read(ctx, rs.Family); err != nil {
			if attempt == 0 && restoreErr == nil && written.byKernel() {
				err = fmt.Errorf("%w: %w", ErrUnverified, err)
			}
			return written, errors.Join(restoreErr, err)
		}
		diff := iptables.Diff(rs, observed)
		switch {
		case len(diff) == 0 && (unknownOutcome(restoreErr) || (attempt == 0 && notFresh(written, w))):
			return written, nil // the lost transaction was committed, or the rules were there
		case restoreErr != nil:
			lastErr = restoreErr
		case len(diff) > 0:
			lastErr = fmt.Errorf("%s rules differ after writing them: %s", rs.Family, strings.Join(diff, "; "))
		default:
			return written, nil
		}
	}
	return written, lastErr
}

// errLate: the caller's deadline passed before the first write.
var errLate = errors.New("past the deadline: the caller stopped waiting")

// Late says whether w's deadline has passed: no first write starts then.
func (w Write) Late() bool { return !w.Deadline.IsZero() && !time.Now().Before(w.Deadline) }

// ErrLate: the caller's deadline passed before the first write.
var ErrLate = errLate

// ErrUnverified: the family's rules went in whole, in one transaction
// (or x_tables replaces, a family written whole or not at all), but could
// not be read back. A repair keeps them: they are the model.
var ErrUnverified = errors.New("written whole, but not read back")

// notFresh: the first write was refused in a namespace known to hold
// rules of ours (a table found not fresh; any refusal of a replacing
// write), which is read back and reconciled, never restored into as if
// fresh.
func notFresh(first Written, w Write) bool {
	return errors.Is(first.Refused, legacy.ErrNotFresh) || (w.Replace && first.Refused != nil)
}

// unknownOutcome: the first write may or may not be in.
func unknownOutcome(err error) bool {
	return errors.Is(err, nfnl.ErrUnknownOutcome) || errors.Is(err, legacy.ErrPartial)
}

// fresh writes the ruleset in one transaction, or in x_tables replaces,
// when w asks for its family. A failure leaves the namespace as it was,
// but for unknownOutcome; either way Apply goes on with iptables-restore
// and the read-back, unless Only.
func (p *Programmer) fresh(rs *iptables.Ruleset, w Write) Written {
	layout, ok := w.Netlink[rs.Family]
	switch {
	case !ok && !w.Legacy[rs.Family]:
		return Written{}
	case p.restorer != nil:
		// The owner match is the pod's user namespace's to write.
		return Written{Refused: ErrUserNS}
	}
	if w.Late() {
		return Written{Refused: errLate}
	}
	if !ok {
		replace := p.Replace
		if replace == nil {
			replace = legacy.Write
		}
		lockBy := w.Deadline
		if lockBy.IsZero() {
			lockBy = time.Now().Add(LockWaitSeconds * time.Second)
		}
		if err := replace(rs, lockBy); err != nil {
			return Written{Refused: err}
		}
		return Written{Replaced: true}
	}
	write := p.Transaction
	switch {
	case w.Replace:
		if write = p.Replacement; write == nil {
			write = nfnl.Replace
		}
	case write == nil:
		write = nfnl.Write
	}
	if err := write(rs, layout); err != nil {
		return Written{Refused: err}
	}
	return Written{Netlink: true}
}

// Check compares the namespace with the model and lists the differences.
func (p *Programmer) Check(ctx context.Context, m iptables.Model) ([]string, error) {
	var diffs []string
	for _, rs := range m.Rulesets() {
		d, err := p.checkFamily(ctx, rs)
		if err != nil {
			return nil, err
		}
		for _, d := range d {
			diffs = append(diffs, rs.Family.String()+": "+d)
		}
	}
	return diffs, nil
}

// checkFamily is Check for one family: a state Confirmed has seen
// iptables-save print as the ruleset holds it; any other is read with
// iptables-save, and confirmed if it is the ruleset and the namespace did
// not change from the fingerprint to the read's end (on legacy: held the
// ruleset exactly before and after). A fingerprint that cannot be read
// costs only the shortcut.
func (p *Programmer) checkFamily(ctx context.Context, rs *iptables.Ruleset) ([]string, error) {
	var key string
	var fp nfnl.Fingerprint
	var gen uint32
	var reread func() bool // the state unchanged across the save's read
	if p.Confirmed != nil {
		b, err := p.BackendFor(rs.Family).Resolve(rs.Family == iptables.IPv6)
		if err == nil && (b == release.NFT || p.Confirmed.holds != nil) {
			key = confirmKey(CommandsFor(p.BackendFor(rs.Family), rs.Family).Save, rs)
		}
		switch {
		case err != nil:
		case b == release.NFT:
			if fp, gen, err = p.Confirmed.read(rs.Family); err == nil {
				if p.Confirmed.known(key, fp) {
					return nil, nil
				}
				// No commit (a change undone is two), and no table gone
				// with its owner's socket (not a commit).
				reread = func() bool {
					fpAfter, genAfter, err := p.Confirmed.read(rs.Family)
					return err == nil && genAfter == gen && fpAfter == fp
				}
			}
		case b == release.Legacy && p.Confirmed.holds != nil:
			if held, ok, err := p.Confirmed.holds(rs); err == nil && ok {
				if fp = held; p.Confirmed.known(key, fp) {
					return nil, nil
				}
				reread = func() bool {
					after, ok, err := p.Confirmed.holds(rs)
					return err == nil && ok && after == held
				}
			}
		}
	}
	observed, err := p.Read(ctx, rs.Family)
	if err != nil {
		return nil, err
	}
	diffs := iptables.Diff(rs, observed)
	if len(diffs) == 0 && reread != nil && reread() {
		p.Confirmed.add(key, fp)
	}
	return diffs, nil
}

// Cleanup removes every chain of ours and every jump into one from the given
// families, whatever model put them there.
func (p *Programmer) Cleanup(ctx context.Context, families ...iptables.Family) error {
	var errs []error
	for _, f := range families {
		observed, err := p.Read(ctx, f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if observed.Empty() {
			continue
		}
		text, err := iptables.Plan(nil, observed)
		if err == nil {
			err = p.restore(ctx, f, text)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Read returns a family's tables as iptables-save prints them.
func (p *Programmer) Read(ctx context.Context, f iptables.Family) (*iptables.Observed, error) {
	out, err := p.Runner.Run(ctx, nil, CommandsFor(p.BackendFor(f), f).Save)
	if err != nil {
		return nil, err
	}
	return iptables.ParseSave(out)
}

func (p *Programmer) restore(ctx context.Context, f iptables.Family, text []byte) error {
	r := p.Runner
	if p.restorer != nil {
		r = p.restorer
	}
	_, err := r.Run(ctx, text, CommandsFor(p.BackendFor(f), f).Restore, "--noflush", "--wait="+strconv.Itoa(LockWaitSeconds))
	return err
}

// BackendFor is the backend f's rules are read and written through.
func (p *Programmer) BackendFor(f iptables.Family) release.Backend {
	if f == iptables.IPv6 && p.BackendIPv6 != "" {
		return p.BackendIPv6
	}
	return p.Backend
}
