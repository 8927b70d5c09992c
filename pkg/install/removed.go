package install

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// An agent can outlive istio-cni: `helm uninstall --cascade=orphan` (or
// `kubectl delete --cascade=orphan`) deletes the DaemonSet and the
// ServiceAccounts but leaves the agents' pods running, and no SIGTERM ever
// comes to run the uninstall check. Its node would keep a config whose
// plugin's credentials nobody renews: every meshed pod there fails for
// good. So the agent uninstalls while running once the API shows istio-cni
// is gone (UninstallNow, from pkg/nodeagent/lifecycle), and a restarted orphan (the
// container, after a crash or a node reboot) installs nothing while the
// API refuses its credentials.

// Readiness reasons of an agent that holds nothing on its node: no failure
// of the node, so they never taint it.
const (
	UninstalledReason = "uninstalled while running"
	RefusedReason     = "the API refuses this agent's credentials: not installing"
)

// UninstallNow asks the running installer to uninstall at once and then to
// hold nothing until it stops: istio-cni was removed while this agent runs.
// Safe from any goroutine; the first call wins.
func (in *Installer) UninstallNow(why string) {
	select {
	case in.removeNow <- why:
	default:
	}
}

// uninstallWhileRunning uninstalls and then only keeps the loop's
// liveness beating until ctx ends: nothing is repaired or minted any more,
// and the shutdown has nothing left to decide.
func (in *Installer) uninstallWhileRunning(ctx context.Context, why string) error {
	in.log.Info("uninstalling", "why", why, "while", "running")
	if err := in.Uninstall(); err != nil {
		in.log.Error("uninstalling while running", "error", err.Error())
	}
	in.setReady(false, UninstalledReason+": "+why)
	tick := time.NewTicker(aliveTick)
	defer tick.Stop()
	for {
		in.alive.Beat()
		select {
		case <-ctx.Done():
			in.log.Info("stopping; istio-cni was uninstalled while this agent ran")
			return nil
		case <-tick.C:
		}
	}
}

// refusedAtStart: the first mint was refused for the agent's own
// credentials (401): its ServiceAccount or its pod is gone. Installing then
// would only put back a config that an orphaned agent already removed, so
// the installer holds until a mint succeeds.
func refusedAtStart(r mintResult) bool { return apierrors.IsUnauthorized(r.err) }

// holding reports whether the installer holds its install because the API
// refuses the agent, and says so once.
func (in *Installer) holding() bool {
	if !in.refusedHold {
		return false
	}
	in.setReady(false, RefusedReason+" (its ServiceAccount or its pod is gone: was istio-cni uninstalled with --cascade=orphan?); installing once a token is minted")
	return true
}
