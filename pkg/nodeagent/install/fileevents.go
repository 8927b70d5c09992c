package install

import (
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"istio-cni.local/istio-cni/pkg/chain"
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
	case (dir == in.cfg.CNIBinDir && name == LegacyPluginBinary) || (dir == in.cfg.RunDir && name == LegacyKubeconfigName):
		// Upstream's files (or an earlier release's of ours): whether an
		// entry of upstream's may stay in a config we write.
		t.reason = reasonUpstreamFiles
		return t, true
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
