package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/fsutil"
)

// serviceAccountData is the symlink kubelet swaps when it rotates the
// projected token (the atomic writer's ..data).
const serviceAccountData = "..data"

// watchedDirs are the directories whose changes may need a repair.
func (in *Installer) watchedDirs() []string {
	return []string{in.cfg.CNINetDir, in.cfg.CNIBinDir, in.cfg.KubeconfigDir, in.cfg.ServiceAccountDir}
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
		return t, name == PluginBinary
	case dir == in.cfg.KubeconfigDir:
		t.reason = reasonKubeconfig
		return t, name == KubeconfigName
	// In the config directory the extension decides, as for the runtime:
	// hidden names count, our temp files (.tmp) do not.
	case dir != in.cfg.CNINetDir || !chain.IsConfigName(name):
		return t, false
	case name == in.owned && gone:
		t.reason = reasonConflistDeleted
	case name == in.owned:
		t.reason = reasonConflistChanged
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
	stopServing, err := in.serve(ctx)
	if err != nil {
		return err
	}
	defer stopServing()
	for _, d := range []struct {
		path   string
		mode   os.FileMode
		target func(string) bool
	}{
		{in.cfg.CNIBinDir, 0o755, func(n string) bool { return n == PluginBinary }},
		{in.cfg.CNINetDir, 0o755, chain.IsConfigName},
		{in.cfg.KubeconfigDir, 0o700, func(n string) bool { return n == KubeconfigName }},
	} {
		// Temp files of a write a crash interrupted are never read, but
		// they are ours to clean.
		if _, err := inDir(d.path, d.mode, func(dir *fsutil.Dir) (struct{}, error) {
			return struct{}{}, dir.RemoveTemps(d.target)
		}); err != nil {
			return err
		}
	}
	wa, err := newWatcher(in.watchedDirs())
	if err != nil {
		return err
	}
	defer func() { _ = wa.w.Close() }()
	in.unwatched = wa.missing()
	if in.mint != nil {
		// The first token before the first reconcile, so a fresh node
		// gets a working kubeconfig with everything else; bounded by
		// the mint timeout, and a failure only means not ready until a
		// retry.
		in.startMint(ctx)
		select {
		case r := <-in.minted:
			in.mintDone(r)
		case <-ctx.Done():
		}
	}
	in.reconcile(trigger{reason: reasonInstall, at: in.now()})
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	for {
		select {
		case <-ctx.Done():
			return in.shutdown()
		case ev, ok := <-wa.w.Events:
			if !ok {
				return errWatcherClosed
			}
			if in.handle(wa, append([]fsnotify.Event{ev}, drain(wa.w.Events)...)) && in.conflict != "" {
				cooldown.Reset(in.cfg.ConflictWindow) // the fight goes on
			}
		case err, ok := <-wa.w.Errors:
			if !ok {
				return errWatcherClosed
			}
			// An overflow loses events: reconcile from scratch.
			in.log.Warn("inotify", "error", err.Error())
			in.reconcile(trigger{reason: "watch_error", at: in.now()})
		case <-in.tokenRefresh():
			in.startMint(ctx)
		case r := <-in.minted:
			if in.mintDone(r) {
				in.writePluginToken()
			} else if in.pluginTok.token == "" || !in.now().Before(in.pluginTok.expires) {
				in.writePluginToken() // no valid token: readiness says why
			}
		case <-cooldown.C:
			in.log.Info("the other writer stopped; repairing again", "was", in.conflict)
			in.conflict, in.repairs = "", nil
			in.metrics.Conflict.Set(0)
			in.reconcile(trigger{reason: "conflict_cleared", at: in.now()})
		}
	}
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

// handle reconciles once for a burst of events: named for its first
// relevant event, covering the files all of them concern. It reports
// whether any event was relevant.
func (in *Installer) handle(wa *watcher, evs []fsnotify.Event) bool {
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
		return false
	}
	first.also = also
	in.unwatched = wa.missing()
	in.reconcile(*first)
	// The reconcile may have recreated a missing directory.
	wa.armAll()
	if missing := wa.missing(); len(missing) != len(in.unwatched) {
		in.unwatched = missing
		in.updateReadiness()
	}
	return true
}

// ShutdownReason is the not-ready reason while the agent stops: the plugin
// stays installed, so it is no failure.
const ShutdownReason = "shutting down"

var errNoUninstallCheck = errors.New("no uninstall check configured")

// shutdown leaves everything in place unless the DaemonSet is being deleted.
func (in *Installer) shutdown() error {
	in.setReady(false, ShutdownReason)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := in.uninstall
	if check == nil {
		check = func(context.Context) (bool, error) { return false, errNoUninstallCheck }
	}
	uninstall, err := check(ctx)
	switch {
	case err != nil:
		in.log.Warn("cannot tell uninstall from restart; leaving the plugin installed so pods keep starting", "error", err.Error())
		return nil
	case !uninstall:
		in.log.Info("stopping (restart, update or node shutdown): leaving the plugin installed so pods keep starting")
		return nil
	}
	in.log.Info("the DaemonSet is being deleted: uninstalling")
	return in.Uninstall()
}
