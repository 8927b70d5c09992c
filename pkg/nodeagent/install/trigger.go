package install

import "time"

// trigger is why a reconcile runs.
type trigger struct {
	reason string    // "install" at start-up, else what changed
	file   string    // the file whose change was noticed, if any
	at     time.Time // when it was noticed
	// also holds the reasons of the other events of the same burst.
	also []string
	// writer is what the event tells of whoever changed our file.
	writer string
}

// writerOr is what the trigger tells of the other writer, or def.
func (t trigger) writerOr(def string) string {
	if t.writer != "" {
		return t.writer
	}
	return def
}

// concerns reports whether the trigger (or another event of its burst) may
// have changed what file needs.
func (t trigger) concerns(file string) bool {
	for _, reason := range append([]string{t.reason}, t.also...) {
		if concerns(reason, file) {
			return true
		}
	}
	return false
}

func concerns(reason, file string) bool {
	switch reason {
	case reasonBinary:
		return file == fileBinary
	case reasonKubeconfig, reasonToken, reasonPluginToken:
		return file == fileKubeconfig
	case reasonConflistChanged, reasonConflistDeleted, reasonConfigChanged, reasonConfigRemoved, reasonUpstreamFiles:
		return file == fileConflist
	}
	return true // install, re-armed watches, lost events
}

// paced reports whether a fight may hold this trigger back: a change to
// our own files, or to a config that is not the primary (one that may sort
// before ours). The primary's own changes, token rotations and start-up
// are followed at once.
func (t trigger) paced(primary string) bool {
	for _, reason := range append([]string{t.reason}, t.also...) {
		switch reason {
		case reasonBinary, reasonKubeconfig, reasonConflistChanged, reasonConflistDeleted:
		case reasonConfigChanged, reasonConfigRemoved:
			if t.file == primary {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// merge folds a held trigger into a later one: one reconcile covers both.
func (t trigger) merge(held *trigger) trigger {
	if held == nil {
		return t
	}
	t.also = append(append(t.also, held.reason), held.also...)
	if t.writer == "" {
		t.writer = held.writer
	}
	if held.at.Before(t.at) {
		t.at = held.at // repair time counts from the first change noticed
	}
	return t
}

// Trigger reasons.
const (
	reasonInstall         = "install"
	reasonBinary          = "binary_changed"
	reasonKubeconfig      = "kubeconfig_changed"
	reasonToken           = "token_rotated"
	reasonPluginToken     = "plugin_token_refresh" // #nosec G101 -- a trigger name, not a credential
	reasonConflistChanged = "conflist_changed"
	reasonConflistDeleted = "conflist_deleted"
	reasonConfigChanged   = "config_changed"
	reasonConfigRemoved   = "config_removed"
	reasonUpstreamFiles   = "upstream_files_changed"
)
