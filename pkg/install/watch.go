package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// serviceAccountData is the symlink kubelet swaps when it rotates the
// projected token (the atomic writer's ..data).
const serviceAccountData = "..data"

// watchedDirs are the directories whose changes may need a repair.
func (in *Installer) watchedDirs() []string {
	return []string{in.cfg.CNINetDir, in.cfg.CNIBinDir, in.cfg.KubeconfigDir, in.cfg.ServiceAccountDir}
}

// classify turns a file event into a reconcile trigger, or ok=false for
// events that cannot need one (our temp files, unrelated files).
func (in *Installer) classify(ev fsnotify.Event, at time.Time) (trigger, bool) {
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	t := trigger{file: name, at: at}
	switch {
	case dir == in.cfg.ServiceAccountDir:
		t.reason = reasonToken
		return t, name == serviceAccountData
	case strings.HasPrefix(name, "."):
		return t, false // our own (or anyone's) temp files
	case dir == in.cfg.CNIBinDir:
		t.reason, t.ours = reasonBinary, true
		return t, name == PluginBinary
	case dir == in.cfg.KubeconfigDir:
		t.reason, t.ours = reasonKubeconfig, true
		return t, name == KubeconfigName
	case dir != in.cfg.CNINetDir || !isCNIConfig(name):
		return t, false
	case name == in.owned && gone:
		t.reason, t.ours = reasonConflistDeleted, true
	case name == in.owned:
		t.reason, t.ours = reasonConflistChanged, true
	case gone:
		t.reason = reasonConfigRemoved
	default:
		t.reason = reasonConfigChanged
	}
	return t, true
}

func isCNIConfig(name string) bool {
	switch filepath.Ext(name) {
	case ".conf", ".conflist", ".json":
		return true
	}
	return false
}

// watcher arms fsnotify watches on the directories and re-arms one that is
// removed or renamed: it watches the parent until the directory is back.
type watcher struct {
	w       *fsnotify.Watcher
	dirs    []string
	missing map[string]bool // watched dir -> waiting in its parent
}

func newWatcher(dirs []string) (*watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("starting inotify: %w", err)
	}
	wa := &watcher{w: w, dirs: dirs, missing: map[string]bool{}}
	for _, d := range dirs {
		wa.arm(d)
	}
	return wa, nil
}

// arm watches dir, or its parent while dir does not exist.
func (wa *watcher) arm(dir string) {
	if err := wa.w.Add(dir); err == nil {
		delete(wa.missing, dir)
		return
	}
	wa.missing[dir] = true
	_ = wa.w.Add(filepath.Dir(dir))
}

// armed reports whether every directory is watched.
func (wa *watcher) armed() bool { return len(wa.missing) == 0 }

// rearm reacts to events on the watched directories themselves; it reports
// whether the set of armed watches changed.
func (wa *watcher) rearm(ev fsnotify.Event) bool {
	for _, d := range wa.dirs {
		if ev.Name != d {
			continue
		}
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			wa.arm(d)
			return true
		}
		if wa.missing[d] && ev.Has(fsnotify.Create) {
			wa.arm(d)
			return true
		}
	}
	return false
}

// Run installs, then watches and repairs until ctx ends; then it shuts down
// (see shutdown).
func (in *Installer) Run(ctx context.Context) error {
	stopServing, err := in.serve(ctx)
	if err != nil {
		return err
	}
	defer stopServing()
	for dir, mode := range map[string]os.FileMode{in.cfg.CNIBinDir: 0o755, in.cfg.CNINetDir: 0o755, in.cfg.KubeconfigDir: 0o700} {
		if err := os.MkdirAll(dir, mode); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	wa, err := newWatcher(in.watchedDirs())
	if err != nil {
		return err
	}
	defer func() { _ = wa.w.Close() }()
	in.watching = wa.armed()
	in.reconcile(trigger{reason: reasonInstall, at: in.now()})
	cooldown := time.NewTimer(time.Hour)
	cooldown.Stop()
	for {
		if in.conflict != "" {
			cooldown.Reset(in.cfg.ConflictWindow)
		}
		select {
		case <-ctx.Done():
			return in.shutdown()
		case ev := <-wa.w.Events:
			in.handle(wa, append([]fsnotify.Event{ev}, drain(wa.w.Events)...))
		case err := <-wa.w.Errors:
			// An overflow loses events: reconcile from scratch.
			in.log.Warn("inotify", "error", err.Error())
			in.reconcile(trigger{reason: "watch_error", at: in.now()})
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
		case ev := <-ch:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// handle reconciles once for a burst of events: named for its first
// relevant event, covering the files all of them concern.
func (in *Installer) handle(wa *watcher, evs []fsnotify.Event) {
	at := in.now()
	var first *trigger
	var also []string
	for _, ev := range evs {
		t, ok := in.classify(ev, at)
		if wa.rearm(ev) {
			in.watching = wa.armed()
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
	if first != nil {
		first.also = also
		in.reconcile(*first)
	}
}

var errNoUninstallCheck = errors.New("no uninstall check configured")

// shutdown leaves everything in place unless the DaemonSet is being deleted.
func (in *Installer) shutdown() error {
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
