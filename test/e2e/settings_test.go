package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// TestSettingsRollTheAgent: a settings change made the kustomize way (an
// overlay's configMapGenerator merge, `kubectl apply -k`) restarts the
// agent by itself, through the DaemonSet's rolling update, and the new
// agent runs with it (its log at debug); undoing it rolls back.
// TestHelmInstallAndUninstall does the same with `helm upgrade --set`.
func TestSettingsRollTheAgent(t *testing.T) {
	requireInstalled(t)
	old, _ := installerPodOrEmpty(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := env.node.SetSettings(ctx, env.overlay, nil); err != nil {
			t.Errorf("restoring the overlay's settings: %v", err)
		}
	})
	start := time.Now()
	if err := env.node.SetSettings(t.Context(), env.overlay, map[string]string{"LOG_LEVEL": "debug"}); err != nil {
		t.Fatal(err)
	}
	debug := requireAgentRolled(t, old, "DEBUG")
	t.Logf("apply -k to the new agent ready at debug: %v", time.Since(start).Round(time.Millisecond)) // BENCHMARKS.md
	if err := env.node.SetSettings(t.Context(), env.overlay, nil); err != nil {
		t.Fatal(err)
	}
	requireAgentRolled(t, debug, "INFO")
	requireInstalled(t)
}

// requireAgentRolled waits for the agent pod that replaced old (no manual
// restart: the settings change alone rolls it), ready, whose start line
// says it logs at level, and returns it.
func requireAgentRolled(t *testing.T, old cluster.Pod, level string) cluster.Pod {
	t.Helper()
	var agent cluster.Pod
	poll.Until(t, 3*time.Minute, "a new agent pod, ready, after the settings change", func() (bool, string) {
		p, ok := installerPodOrEmpty(t)
		agent = p
		return ok && p.Metadata.UID != old.Metadata.UID && allReady(p), p.Metadata.Name
	})
	poll.Until(t, time.Minute, "the new agent's start line with log_level "+level, func() (bool, string) {
		log := env.node.ContainerLog(agent, "install-cni")
		for line := range strings.Lines(log) {
			if strings.Contains(line, `"msg":"starting"`) {
				return strings.Contains(line, `"log_level":"`+level+`"`), line
			}
		}
		return false, "no start line yet"
	})
	if level == "DEBUG" {
		if log := env.node.ContainerLog(agent, "install-cni"); !strings.Contains(log, `"level":"DEBUG"`) {
			t.Errorf("LOG_LEVEL=debug: the agent logged no debug line:\n%s", log)
		}
	}
	return agent
}
