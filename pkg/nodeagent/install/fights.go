package install

import (
	"fmt"
	"slices"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
)

// Fight is another writer that keeps undoing our files.
type Fight struct {
	// File is ours, or the foreign config that keeps sorting before ours.
	File string
	// Writer says what we know of the other writer: the file it writes,
	// or what it left in ours.
	Writer string
	// Repairs within Window made it a fight.
	Repairs int
	Window  time.Duration
	// Hint names the setting that stops the primary, when it is one known
	// to take the config directory over (chain.FightHint); else "".
	Hint string
}

func (f Fight) String() string {
	s := fmt.Sprintf("another writer keeps undoing %s (%s): %d repairs in %s", f.File, f.Writer, f.Repairs, f.Window)
	if f.Hint != "" {
		s += ". Hint: " + f.Hint
	}
	return s
}

// Notifier hears when a fight starts and when it is over, and when another
// installer's istio-cni is found on the node (file: the config holding its
// entry).
type Notifier interface {
	Fighting(Fight)
	Calm(Fight)
	OtherInstaller(file string)
}

// Pacing under a fight: the first repair waits minPace after the last one,
// each next waits twice as long, up to maxPace. Outside a fight a repair is
// immediate. Repairs never stop: while the other writer wins, new pods may
// start without the plugin, and the node audit can only repair meshed pods
// after the fact.
const (
	minPace = 10 * time.Millisecond
	maxPace = time.Second
)

// fights tells a writer that keeps undoing our files from a one-off change,
// and paces repairs while it lasts.
type fights struct {
	threshold int
	window    time.Duration

	recent []time.Time // repairs within the window
	active *Fight      // the fight going on, nil when none
	pace   time.Duration
	last   time.Time // the last repair
}

func newFights(threshold int, window time.Duration) *fights {
	return &fights{threshold: threshold, window: window}
}

// repaired records a repair of file at `at`, forced by writer. It returns
// the fight when this repair starts one.
func (f *fights) repaired(at time.Time, file, writer string) *Fight {
	cutoff := at.Add(-f.window)
	f.recent = slices.DeleteFunc(append(f.recent, at), func(t time.Time) bool { return t.Before(cutoff) })
	f.last = at
	if f.active != nil {
		f.active.File, f.active.Writer, f.active.Repairs = file, writer, len(f.recent)
		f.pace = min(2*f.pace, maxPace)
		return nil
	}
	if len(f.recent) < f.threshold {
		return nil
	}
	f.active = &Fight{File: file, Writer: writer, Repairs: len(f.recent), Window: f.window}
	f.pace = minPace
	return f.active
}

// hold is how long to wait before the next repair: zero outside a fight.
func (f *fights) hold(now time.Time) time.Duration {
	if f.active == nil {
		return 0
	}
	return max(f.last.Add(f.pace).Sub(now), 0)
}

// calmAt is when the fight is over if no repair comes first; zero when
// there is none.
func (f *fights) calmAt() time.Time {
	if f.active == nil {
		return time.Time{}
	}
	return f.last.Add(f.window)
}

// end closes the fight and returns it.
func (f *fights) end() Fight {
	ended := *f.active
	f.active, f.recent, f.pace = nil, nil, 0
	return ended
}

// startFight reports a fight: the log, the metric, not ready (so the
// node's startup taint comes back), and an Event on the Node.
func (in *Installer) startFight(f Fight) {
	// Our chained copy holds the primary's plugins (or is the primary's own
	// file, in place); the writer may be named by a file only.
	if f.Hint = chain.FightHint(in.files.primary, in.files.lastConflist); f.Hint == "" {
		f.Hint = chain.FightHint(f.File+" "+f.Writer, nil)
	}
	in.fights.active.Hint = f.Hint
	in.metrics.Conflict.Set(1)
	in.log.Error("conflict: another writer keeps undoing our files; repairing at most once a second until it stops",
		"file", f.File, "writer", f.Writer, "repairs", f.Repairs, "window", f.Window.String(),
		"conflist", in.files.owned, "primary", in.files.primary, "hint", f.Hint)
	if in.deps.Notify != nil {
		in.deps.Notify.Fighting(f)
	}
}

// endFight: no repair was forced for a whole window.
func (in *Installer) endFight() {
	f := in.fights.end()
	in.metrics.Conflict.Set(0)
	in.log.Info("conflict over: no repair forced for a whole window", "file", f.File, "writer", f.Writer, "window", f.Window.String())
	if in.deps.Notify != nil {
		in.deps.Notify.Calm(f)
	}
	in.updateReadiness()
}
