package nodeagent

import (
	"context"
	"os"
	"path/filepath"

	"istio-cni.local/istio-cni/pkg/agentevents"
	"istio-cni.local/istio-cni/pkg/install"
)

// listenReports logs what the plugin reports on the node, so `kubectl
// logs` on the agent shows every pod's ADD, and wakes the audit for each
// pod an ADD concerned. It runs until ctx ends; wait returns once it has.
func (a *Agent) listenReports(ctx context.Context, wake func(uid string)) (wait func(), err error) {
	// The run directory is the installer's to create; it may not exist yet.
	if err := os.MkdirAll(a.cfg.Install.KubeconfigDir, 0o700); err != nil {
		return nil, err
	}
	l, err := agentevents.Listen(filepath.Join(a.cfg.Install.KubeconfigDir, install.EventsSocket))
	if err != nil {
		return nil, err
	}
	log := a.log.With("component", "plugin")
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = l.Close() }()
		err := l.Run(ctx, func(ev agentevents.Event) {
			attrs := []any{"verb", ev.Verb, "pod", ev.Pod, "container", ev.Container, "redirect", ev.Redirect,
				"reason", ev.Reason, "duration_ms", ev.DurationMS}
			if ev.Families != "" {
				attrs = append(attrs, "families", ev.Families)
			}
			if ev.Error != "" {
				log.Error("plugin "+ev.Verb+" failed", append(attrs, "error", ev.Error)...)
			} else {
				log.Info("plugin "+ev.Verb, attrs...)
			}
			if ev.Verb == "ADD" && ev.PodUID != "" && wake != nil {
				wake(ev.PodUID)
			}
		})
		if err != nil {
			log.Error("plugin reports stopped", "error", err.Error())
		}
	}()
	return func() { <-done }, nil
}
