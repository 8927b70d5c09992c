package install

import (
	"context"
	"errors"
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

// ErrReinstalled ends an agent that uninstalled while running once
// istio-cni is installed around it again: kubelet restarts it, and the
// restarted agent installs.
var ErrReinstalled = errors.New("istio-cni is installed again around this agent, which uninstalled while running: exiting so that kubelet restarts it to install")

// reinstallCheck is how often an agent that uninstalled while running asks
// whether istio-cni is back.
const reinstallCheck = 30 * time.Second

// uninstallWhileRunning uninstalls and then only keeps the loop's
// liveness beating until ctx ends: nothing is repaired or minted any more,
// and the shutdown has nothing left to decide. Should istio-cni be
// installed again around it (its pod adopted by a new DaemonSet), it
// returns ErrReinstalled.
func (in *Installer) uninstallWhileRunning(ctx context.Context, why string) error {
	in.log.Info("uninstalling", "why", why, "while", "running")
	if err := in.Uninstall(); err != nil {
		in.log.Error("uninstalling while running", "error", err.Error())
	}
	in.setReady(false, UninstalledReason+": "+why)
	tick := time.NewTicker(aliveTick)
	defer tick.Stop()
	var check <-chan time.Time
	if in.deps.Reinstalled != nil {
		t := time.NewTicker(in.reinstallEvery)
		defer t.Stop()
		check = t.C
	}
	for {
		in.alive.Beat()
		select {
		case <-ctx.Done():
			in.log.Info("stopping; istio-cni was uninstalled while this agent ran")
			return nil
		case <-check:
			if back, why := in.deps.Reinstalled(ctx); back {
				in.log.Warn(ErrReinstalled.Error(), "why", why)
				return ErrReinstalled
			}
		case <-tick.C:
		}
	}
}

// clearHeldNode removes what an earlier run left once a hold has lasted
// the plugin's token lifetime: by then no token that run minted for the
// plugin is valid, so a config still chaining istio-cni could only fail
// every pod on the node, for as long as the API refuses this agent. The
// hold goes on: a mint that succeeds installs again.
func (in *Installer) clearHeldNode() {
	if !in.refusedHold || in.holdCleared {
		return
	}
	in.holdCleared = true
	in.log.Warn("the API has refused this agent for the plugin's whole token lifetime: removing what an earlier run installed, so the node's pods start without istio-cni rather than not at all",
		"held", in.cfg.PluginTokenTTL.String())
	if err := in.Uninstall(); err != nil {
		in.log.Error("removing an earlier run's files while held", "error", err.Error())
	}
}

// agentRefused: a mint was refused for the agent's own credentials (401):
// its ServiceAccount or its pod is gone. When the first mint is, installing
// would only put back a config that an orphaned agent already removed, so
// the installer holds until a mint succeeds.
func agentRefused(err error) bool { return apierrors.IsUnauthorized(err) }

// holding reports whether the installer holds its install because the API
// refuses the agent, and says so once.
func (in *Installer) holding() bool {
	if !in.refusedHold {
		return false
	}
	in.setReady(false, RefusedReason+" (its ServiceAccount or its pod is gone: was istio-cni uninstalled with --cascade=orphan?); installing once a token is minted")
	return true
}
