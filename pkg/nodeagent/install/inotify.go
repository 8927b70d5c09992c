package install

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/fsnotify/fsnotify"
)

// watcher arms inotify watches on directories. A directory that does not
// exist (yet, or any more) is waited for from its nearest existing
// ancestor, and armed as soon as it is back.
type watcher struct {
	w       *fsnotify.Watcher
	dirs    []string
	waiting map[string]string // directory -> the ancestor watched for it
}

func newWatcher(dirs []string) (*watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("starting inotify: %w", err)
	}
	wa := &watcher{w: w, dirs: dirs, waiting: map[string]string{}}
	wa.armAll()
	return wa, nil
}

// armAll arms every directory not armed; it reports whether one was
// newly armed (a directory that came back, the reconcile itself may have
// made it).
func (wa *watcher) armAll() bool {
	armed := false
	for _, d := range wa.dirs {
		if !wa.isArmed(d) {
			wa.arm(d)
			armed = armed || wa.isArmed(d)
		}
	}
	return armed
}

func (wa *watcher) isArmed(dir string) bool { return slices.Contains(wa.w.WatchList(), dir) }

// arm watches dir, or its nearest existing ancestor while dir is missing.
// After watching the ancestor it tries dir once more: it may have appeared
// in between, and that event would be lost.
func (wa *watcher) arm(dir string) {
	if wa.w.Add(dir) == nil {
		wa.stopWaiting(dir)
		return
	}
	for anc := filepath.Dir(dir); ; anc = filepath.Dir(anc) {
		if st, err := os.Stat(anc); err == nil && st.IsDir() && wa.w.Add(anc) == nil {
			wa.waiting[dir] = anc
			break
		}
		if anc == filepath.Dir(anc) {
			wa.waiting[dir] = ""
			break
		}
	}
	if wa.w.Add(dir) == nil {
		wa.stopWaiting(dir)
	}
}

// stopWaiting drops dir's ancestor watch unless something else needs it.
func (wa *watcher) stopWaiting(dir string) {
	anc, ok := wa.waiting[dir]
	delete(wa.waiting, dir)
	if !ok || anc == "" || slices.Contains(wa.dirs, anc) {
		return
	}
	for _, other := range wa.waiting {
		if other == anc {
			return
		}
	}
	_ = wa.w.Remove(anc)
}

// missing lists the directories not armed, sorted.
func (wa *watcher) missing() []string {
	var out []string
	for d := range wa.waiting {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// rearm reacts to events about the watched directories themselves (or an
// ancestor of a missing one); it reports whether the armed set changed.
func (wa *watcher) rearm(ev fsnotify.Event) bool {
	before := len(wa.waiting)
	for _, d := range wa.dirs {
		_, waiting := wa.waiting[d]
		switch {
		case ev.Name == d && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
			wa.arm(d)
			return true
		case waiting && ev.Has(fsnotify.Create) && (ev.Name == d || isAncestor(ev.Name, d)):
			wa.arm(d)
		}
	}
	return len(wa.waiting) != before
}

func isAncestor(anc, dir string) bool {
	rel, err := filepath.Rel(anc, dir)
	return err == nil && rel != "." && !filepath.IsAbs(rel) && rel[0] != '.'
}
