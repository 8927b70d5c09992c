package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/nodeagent/hostfs"
)

// serviceAccountData is the symlink kubelet swaps when it rotates the
// projected token (the atomic writer's ..data).
const serviceAccountData = "..data"

// watchedDirs are the directories whose changes may need a repair.
func (in *Installer) watchedDirs() []string {
	return []string{in.cfg.CNINetDir, in.cfg.CNIBinDir, in.cfg.RunDir, in.cfg.ServiceAccountDir}
}

// classify turns a file event into a reconcile trigger, or ok=false for
// events that cannot need one.
func (in *Installer) classify(ev fsnotify.Event, at time.Time) (trigger, bool) {
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	t := trigger{file: name, at: at}
	switch {
	case dir == in.cfg.ServiceAccountDir:
		t.reason = reasonToken
		return t, name == serviceAccountData
	case dir == in.cfg.CNIBinDir:
		t.reason = reasonBinary
		return t, slices.Contains(PluginBinaries, name)
	case dir == in.cfg.RunDir:
		t.reason = reasonKubeconfig
		return t, name == KubeconfigName || isRunDir(name)
	// In the config directory the extension decides, as for the runtime:
	// hidden names count, our temp files (.tmp) do not.
	case dir != in.cfg.CNINetDir || !chain.IsConfigName(name):
		return t, false
	case name == in.files.owned && gone:
		t.reason, t.writer = reasonConflistDeleted, "deleted by another process"
	case name == in.files.owned:
		t.reason = reasonConflistChanged
		// What the other writer left says who it may be.
		if data, err := os.ReadFile(ev.Name); err == nil {
			t.writer = "rewritten by another process, now " + chain.Describe(data)
		}
	case gone:
		t.reason = reasonConfigRemoved
	default:
		t.reason = reasonConfigChanged
	}
	return t, true
}

var errWatcherClosed = errors.New("inotify watcher closed")

// Run installs, then watches and repairs until ctx ends; then it shuts down
// (see shutdown).
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
	if in.tokens != nil {
		// The first token before the first reconcile, so a fresh node
		// gets a working kubeconfig with everything else; bounded by
		// the mint timeout, and a failure only means not ready until a
		// retry.
		in.tokens.start(ctx)
		select {
		case r := <-in.tokens.minted:
			in.tokens.done(r)
			in.refusedHold = refusedAtStart(r)
		case <-ctx.Done():
		}
	}
	var holdLapsed <-chan time.Time
	if in.refusedHold && in.cfg.PluginTokenTTL > 0 {
		t := time.NewTimer(in.cfg.PluginTokenTTL)
		defer t.Stop()
		holdLapsed = t.C
	}
	in.reconcile(trigger{reason: reasonInstall, at: in.now()})
	l := loop{in: in, wa: wa, pacer: stoppedTimer(), calm: stoppedTimer()}
	tick := time.NewTicker(aliveTick)
	defer tick.Stop()
	var nodeTick <-chan time.Time
	if in.tokens != nil && in.deps.NodeUID != nil {
		t := time.NewTicker(in.nodeEvery)
		defer t.Stop()
		nodeTick = t.C
	}
	for {
		in.alive.Beat()
		l.armCalm()
		var due <-chan time.Time
		var minted <-chan mintResult
		if in.tokens != nil {
			due, minted = in.tokens.due(), in.tokens.minted
		}
		select {
		case <-ctx.Done():
			if in.refusedHold {
				in.log.Info("stopping; nothing was installed: the API refused this agent's credentials")
				return nil
			}
			return in.shutdown()
		case why := <-in.removeNow:
			return in.uninstallWhileRunning(ctx, why)
		case ev, ok := <-wa.w.Events:
			if !ok {
				return errWatcherClosed
			}
			if t, relevant := in.collect(wa, append([]fsnotify.Event{ev}, drain(wa.w.Events)...)); relevant {
				l.dispatch(t)
			}
		case err, ok := <-wa.w.Errors:
			if !ok {
				return errWatcherClosed
			}
			// An overflow loses events: reconcile from scratch.
			in.log.Warn("inotify", "error", err.Error())
			l.now(trigger{reason: "watch_error", at: in.now()})
		case <-l.pacer.C:
			if l.held != nil {
				t := *l.held
				l.held = nil
				l.now(t)
			}
		case <-l.calm.C:
			if at := in.fights.calmAt(); !at.IsZero() && !in.now().Before(at) {
				in.endFight()
			}
		case <-holdLapsed:
			in.clearHeldNode()
		case <-due:
			in.tokens.start(ctx)
		case <-in.refused:
			if in.tokens != nil && in.tokens.refused() {
				in.log.Info("the API server refused the plugin's token: minting a new one")
				in.tokens.start(ctx)
			}
		case <-nodeTick:
			// A token that names no node cannot be checked: the API
			// server binds it otherwise, and renewal replaces it.
			if bound := in.tokens.boundNode(); bound != "" {
				in.checkNode(ctx, bound)
			}
		case uid := <-in.nodeSeen:
			if in.tokens.nodeChanged(uid) && in.tokens.refused() {
				in.log.Info("the node was registered again (a new UID), which revoked the plugin's token: minting a new one", "node_uid", uid)
				in.tokens.start(ctx)
			}
		case r := <-minted:
			// A new token, or none valid any more (readiness says why).
			changed := in.tokens.done(r)
			switch {
			case in.refusedHold && changed:
				in.log.Info("the API accepts this agent again: installing")
				in.refusedHold = false
				l.now(trigger{reason: reasonInstall, at: in.now()})
			case changed || !in.tokens.valid():
				in.writePluginToken()
			}
		case <-tick.C: // only shows the loop turns
		}
	}
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
	pacer *time.Timer // fires when the held trigger may run
	calm  *time.Timer // fires when the fight may be over
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
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

// drain takes the events already queued: one burst, one reconcile. It never
// waits, so it delays no repair.
func drain(ch <-chan fsnotify.Event) []fsnotify.Event {
	var evs []fsnotify.Event
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// collect turns a burst of events into one trigger: named for its first
// relevant event, covering the files all of them concern. It reports
// whether any event was relevant.
func (in *Installer) collect(wa *watcher, evs []fsnotify.Event) (trigger, bool) {
	at := in.now()
	var first *trigger
	var also []string
	for _, ev := range evs {
		t, ok := in.classify(ev, at)
		if wa.rearm(ev) {
			t, ok = trigger{reason: "watch_rearmed", file: ev.Name, at: at}, true
		}
		switch {
		case !ok:
		case first == nil:
			first = &t
		default:
			also = append(also, t.reason)
		}
	}
	if first == nil {
		return trigger{}, false
	}
	first.also = also
	in.unwatched = wa.missing()
	return *first, true
}
