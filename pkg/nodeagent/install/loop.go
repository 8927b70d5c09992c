package install

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

var errWatcherClosed = errors.New("inotify watcher closed")

// Run installs, then watches and repairs until ctx ends; then it shuts down
// (see shutdown). The plugin's token is kept on a goroutine of its own
// (pluginToken), whose news the loop takes.
func (in *Installer) Run(ctx context.Context) error {
	if err := in.removeTemps(); err != nil {
		return err
	}
	wa, err := newWatcher(in.watchedDirs())
	if err != nil {
		return err
	}
	defer func() { _ = wa.w.Close() }()
	in.unwatched = wa.missing()
	tokens, stopTokens := in.startTokens(ctx)
	defer stopTokens()
	in.reconcile(trigger{reason: reasonInstall, at: in.now()})
	l := newLoop(in, wa)
	defer l.tick.Stop()
	for {
		in.alive.Beat()
		l.armCalm()
		select {
		case <-ctx.Done():
			return in.stop()
		case why := <-in.removeNow:
			stopTokens() // nothing is minted any more
			return in.uninstallWhileRunning(ctx, why)
		case ev, ok := <-wa.w.Events:
			if !ok {
				return errWatcherClosed
			}
			l.fileEvents(ev)
		case err, ok := <-wa.w.Errors:
			if !ok {
				return errWatcherClosed
			}
			// An overflow loses events: reconcile from scratch.
			in.log.Warn("inotify", "error", err.Error())
			l.now(trigger{reason: "watch_error", at: in.now()})
		case <-l.pacer.C:
			l.release()
		case <-l.calm.C:
			if at := in.fights.calmAt(); !at.IsZero() && !in.now().Before(at) {
				in.endFight()
			}
		case n := <-tokens:
			l.takeToken(n)
		case <-l.tick.C: // only shows the loop turns
		}
	}
}

// stop ends Run when its context does: a hold has nothing to remove,
// anything else shuts down.
func (in *Installer) stop() error {
	if in.refusedHold {
		in.log.Info("stopping; nothing was installed: the API refused this agent's credentials")
		return nil
	}
	return in.shutdown()
}

// removeTemps removes the temp files of writes a crash interrupted: never
// read, but ours to clean.
func (in *Installer) removeTemps() error {
	for _, d := range []struct {
		path   string
		mode   os.FileMode
		target func(string) bool
	}{
		{in.cfg.CNIBinDir, 0o755, func(n string) bool { return slices.Contains(PluginBinaries, n) }},
		{in.cfg.CNINetDir, 0o755, chain.IsConfigName},
		{in.cfg.RunDir, 0o700, func(n string) bool { return n == KubeconfigName }},
	} {
		if _, err := inDir(d.path, d.mode, func(dir *hostfs.Dir) (struct{}, error) {
			return struct{}{}, dir.RemoveTemps(d.target)
		}); err != nil {
			return err
		}
	}
	return nil
}

// loop is Run's state between turns: a trigger held back by a fight, and
// the timers that end the hold and the fight.
type loop struct {
	in    *Installer
	wa    *watcher
	held  *trigger
	pacer *time.Timer  // fires when the held trigger may run
	calm  *time.Timer  // fires when the fight may be over
	tick  *time.Ticker // turns the loop when nothing happens (liveness)
}

func newLoop(in *Installer, wa *watcher) *loop {
	return &loop{in: in, wa: wa, pacer: stoppedTimer(), calm: stoppedTimer(), tick: time.NewTicker(aliveTick)}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// fileEvents takes ev and the events queued behind it: one burst, one
// reconcile, if any of them is relevant.
func (l *loop) fileEvents(ev fsnotify.Event) {
	if t, relevant := l.in.collect(l.wa, append([]fsnotify.Event{ev}, drain(l.wa.w.Events)...)); relevant {
		l.dispatch(t)
	}
}

// dispatch reconciles at once, or holds a repair back while a fight paces
// them; a later trigger that may not wait takes the held one along.
func (l *loop) dispatch(t trigger) {
	if hold := l.in.fights.hold(l.in.now()); hold > 0 && t.paced(l.in.files.primary) {
		merged := t.merge(l.held)
		l.held = &merged
		l.pacer.Reset(hold)
		return
	}
	l.now(t.merge(l.held))
	l.held = nil
}

// release runs the trigger a fight held back, once the pace allows.
func (l *loop) release() {
	if l.held != nil {
		l.now(*l.held)
	}
}

// now reconciles, then re-arms watches a recreated directory needs.
func (l *loop) now(t trigger) {
	l.pacer.Stop()
	l.held = nil
	in := l.in
	in.reconcile(t)
	if l.wa.armAll() {
		// Whatever was written into a directory between the reconcile's
		// look and its watch went unseen: look again.
		in.reconcile(trigger{reason: "watch_rearmed", at: in.now()})
	}
	if missing := l.wa.missing(); len(missing) != len(in.unwatched) {
		in.unwatched = missing
		in.updateReadiness()
	}
}

// armCalm sets the calm timer to when the fight would be over.
func (l *loop) armCalm() {
	at := l.in.fights.calmAt()
	if at.IsZero() {
		l.calm.Stop()
		return
	}
	l.calm.Reset(max(at.Sub(l.in.now()), 0))
}
