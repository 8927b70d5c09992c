package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

var (
	chaosIterations = flag.Int("chaos.iterations", 7, "perturbations TestChaos runs, one of each kind in turn (make chaos: 50)")
	chaosReport     = flag.String("chaos.report", "", "file TestChaos writes its figures to, as JSON")
)

// A perturbation is one thing that goes wrong on a real node.
type perturbation struct {
	name string
	run  func(ctx context.Context, t *testing.T, c *chaosRun) error
}

// chaosRun is what perturbations may use of the loop: the stream's pods,
// the observer, and the stream's hold on meshed pods.
type chaosRun struct {
	live *livePods
	obs  *observer
	// meshedHold stops the stream creating meshed pods (it creates plain
	// ones instead) while istio-cni is uninstalled: with no mesh CNI on
	// the node there is nothing to redirect them, by design.
	meshedHold atomic.Bool
}

var perturbations = []perturbation{
	{"agent-restart", func(ctx context.Context, t *testing.T, _ *chaosRun) error {
		p, ok := installerPodOrEmpty(t)
		if !ok {
			return errors.New("no agent pod")
		}
		_, err := env.node.Kubectl(ctx, "-n", "istio-cni", "delete", "pod", p.Metadata.Name, "--wait=true")
		return err
	}},
	{"primary-rewrite", func(ctx context.Context, t *testing.T, _ *chaosRun) error {
		// The primary CNI rewrites its config in place (truncate, write),
		// with new content, then puts the original back.
		changed := strings.Replace(string(env.primary), `"isGateway": true`, `"isGateway": true, "mtu": 1400`, 1)
		if changed == string(env.primary) {
			return errors.New("primary config has no isGateway field to change")
		}
		if err := os.WriteFile(env.node.PrimaryConfig, []byte(changed), 0o644); err != nil {
			return err
		}
		time.Sleep(time.Second)
		return os.WriteFile(env.node.PrimaryConfig, env.primary, 0o644)
	}},
	{"foreign-config", func(ctx context.Context, t *testing.T, c *chaosRun) error {
		// Another CNI's config appears sorting first, then goes.
		foreign := filepath.Join(env.node.CNINetDir, "00-foreign.conflist")
		from := time.Now()
		defer func() { c.obs.foreignSpan(from, time.Now()) }()
		if err := os.WriteFile(foreign, env.primary, 0o644); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		return os.Remove(foreign)
	}},
	{"api-outage", func(ctx context.Context, t *testing.T, _ *chaosRun) error {
		if err := env.node.Pause(); err != nil {
			return err
		}
		time.Sleep(5 * time.Second)
		return env.node.Resume(ctx)
	}},
	{"node-reboot", func(ctx context.Context, t *testing.T, _ *chaosRun) error {
		return env.node.Reboot(ctx, cluster.RebootOptions{Down: 2 * time.Second})
	}},
	{"delete-and-recreate", func(ctx context.Context, t *testing.T, _ *chaosRun) error {
		// Argo CD's Replace: the DaemonSet deleted and created again. The
		// heal (the new agent ready) is waited for like any other.
		return replaceDaemonSet(ctx, t, false)
	}},
	{"uninstall-reinstall", func(ctx context.Context, t *testing.T, c *chaosRun) error {
		// kubectl delete -k, then apply -k. Meshed pods are held while
		// istio-cni is away; those started before keep their rules.
		c.meshedHold.Store(true)
		defer c.meshedHold.Store(false)
		if err := c.settled(ctx); err != nil {
			return err
		}
		// A running agent to uninstall: right after delete-and-recreate
		// the node may have none (the old DaemonSet's pod terminating, the
		// new one's not yet scheduled), and a node with no agent at the
		// uninstall keeps its files by design (the uninstall Job's case,
		// TestCleanupAfterUninstallWithoutAgent). The old DaemonSet's pod,
		// still running while the garbage collector lags after the API
		// outage, will do: the namespace's deletion stops it.
		var agent cluster.Pod
		if err := poll.Wait(3*time.Minute, "a running agent to uninstall", func() (bool, string) {
			// Any ready one: the new DaemonSet's pod may be listed
			// first, Pending behind the old one's host ports.
			for _, p := range installerPods(t) {
				if p.Metadata.DeletionTimestamp == nil && allReady(p) {
					agent = p
					return true, ""
				}
			}
			return false, "agent pods: " + agentPodStates(t)
		}); err != nil {
			return err
		}
		agentLog := followLog(agent)
		defer agentLog()
		if out, err := env.node.Kubectl(ctx, "delete", "-k", env.overlay, "--wait=true"); err != nil {
			return fmt.Errorf("kubectl delete -k: %w\n%s", err, out)
		}
		// The agent uninstalls once the garbage collector stops its pod,
		// which after an API outage can take the controller manager
		// minutes on this single-node control plane.
		if err := poll.Wait(5*time.Minute, "uninstalled", func() (bool, string) {
			return !exists(ownedPath()) && !exists(pluginPath()) && !exists(fullPath()) && !exists(helperPath()), "files left"
		}); err != nil {
			return fmt.Errorf("%w\nagent pods now: %s\nagent %s's log:\n%s\nkubelet of it:\n%s", err, agentPodStates(t),
				agent.Metadata.Name, lastLines(agentLog(), 15), logLinesMentioning("kubelet", agent.Metadata.Name, 15))
		}
		t.Logf("the agent's shutdown: %s", uninstallReason(agentLog()))
		if out, err := env.node.Kubectl(ctx, "apply", "-k", env.overlay); err != nil {
			return fmt.Errorf("kubectl apply -k: %w\n%s", err, out)
		}
		_, err := env.node.Kubectl(ctx, "-n", "istio-cni", "rollout", "status", "daemonset/istio-cni-node", "--timeout=3m")
		return err
	}},
}

// settled waits until every pod of the stream runs redirected: none is
// between its creation and its ADD.
func (c *chaosRun) settled(ctx context.Context) error {
	return poll.Wait(time.Minute, "the stream's pods running redirected", func() (bool, string) {
		var waiting []string
		for _, name := range c.live.createdBefore(time.Now()) {
			if !c.obs.runningRedirected(name, time.Time{}) {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0 && ctx.Err() == nil, fmt.Sprint(waiting)
	})
}

// chaosFigures are TestChaos's results.
type chaosFigures struct {
	Iterations int `json:"iterations"`
	// PodsCreated is the meshed pods the stream created; Sandboxes the
	// distinct sandboxes seen with a container running.
	PodsCreated int `json:"pods_created"`
	Sandboxes   int `json:"sandboxes_seen_running"`
	// Unredirected is the sandboxes seen with a container running and
	// their rules missing or different: the number that must be 0.
	// ThroughForeign is those the runtime made with a foreign config
	// first, never passing them to istio-cni (observer.throughForeign):
	// not counted in Unredirected; the heal waits for the audit's repair.
	// RepairedInPlace is those later seen with their rules, same sandbox.
	Unredirected    int `json:"unredirected_running"`
	ThroughForeign  int `json:"unredirected_through_foreign_config"`
	RepairedInPlace int `json:"repaired_in_place"`
	// AgentRepairs is the IstioRedirectRepaired Events on the stream's
	// pods; SandboxFailures its FailedCreatePodSandBox Events (the price of
	// failing closed).
	AgentRepairs    int `json:"agent_repairs"`
	SandboxFailures int `json:"sandbox_failures"`
	// HealMS is, per perturbation, the time from its end until the agent
	// is ready, the runtime's first config chains istio-cni and every
	// running meshed sandbox is redirected.
	HealMS map[string][]float64 `json:"heal_ms"`
	// AgentStartToReadyMS is, per agent restart, the time from the new
	// agent process's start to its /readyz answering 200: the agent's own
	// share of agent-restart's heal time (the rest is the control plane
	// recreating the DaemonSet's pod).
	AgentStartToReadyMS []float64 `json:"agent_start_to_ready_ms"`
	Duration            string    `json:"duration"`
	Unhealed            []string  `json:"unhealed,omitempty"`
	Violations          []string  `json:"violations,omitempty"`
	Foreign             []string  `json:"through_foreign_config,omitempty"`
}

// 7. TestChaos: while a stream of meshed pods is created and deleted, the node
// goes through each perturbation in turn, *chaosIterations times. An
// observer reads every running meshed sandbox's rules straight from the
// runtime and the kernel (it holds while the API is down). No meshed pod may
// be seen running without its rules; every perturbation must heal.
func TestChaos(t *testing.T) {
	requireInstalled(t)
	// A perturbation that fails midway (uninstall-reinstall) must not
	// leave the tests after this one without istio-cni.
	t.Cleanup(func() { ensureInstalled(t) })
	start := time.Now()
	ctx := t.Context()
	obs := &observer{seen: map[string]*sandboxState{}}
	streamCtx, stopStream := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var created int
	live := &livePods{}
	run := &chaosRun{live: live, obs: obs}
	wg.Go(func() { created = stream(streamCtx, t, live, &run.meshedHold) })
	wg.Go(func() { obs.run(streamCtx) })
	figs := chaosFigures{Iterations: *chaosIterations, HealMS: map[string][]float64{}}
	for i := range *chaosIterations {
		p := perturbations[i%len(perturbations)]
		if err := p.run(ctx, t, run); err != nil {
			stopStream()
			wg.Wait()
			t.Fatalf("iteration %d, %s: %v", i, p.name, err)
		}
		end := time.Now()
		if err := waitHealed(ctx, obs, live, end, 3*time.Minute, t.Logf); err != nil {
			figs.Unhealed = append(figs.Unhealed, fmt.Sprintf("%d %s: %v", i, p.name, err))
			continue
		}
		d := time.Since(end)
		figs.HealMS[p.name] = append(figs.HealMS[p.name], float64(d.Milliseconds()))
		if p.name == "agent-restart" {
			if started, err := agentStarted(); err == nil {
				figs.AgentStartToReadyMS = append(figs.AgentStartToReadyMS, float64(readyAt(ctx).Sub(started).Milliseconds()))
			}
		}
		t.Logf("iteration %d: %s healed in %v", i, p.name, d.Round(time.Millisecond))
	}
	// Let the last pods run a while under observation.
	time.Sleep(3 * time.Second)
	stopStream()
	wg.Wait()
	figs.PodsCreated = created
	of := obs.figures()
	figs.Sandboxes, figs.Unredirected, figs.ThroughForeign, figs.RepairedInPlace = of.seen, of.unredirected, of.throughForeign, of.repaired
	figs.Violations, figs.Foreign = of.violations, of.foreign
	figs.AgentRepairs, figs.SandboxFailures = chaosEvents(t)
	figs.Duration = time.Since(start).Round(time.Second).String()
	out, _ := json.MarshalIndent(figs, "", "  ")
	t.Logf("chaos figures:\n%s", out)
	if *chaosReport != "" {
		if err := os.WriteFile(*chaosReport, out, 0o644); err != nil {
			t.Error(err)
		}
	}
	if figs.Unredirected != 0 {
		t.Errorf("%d meshed sandboxes seen running without their rules: %v", figs.Unredirected, figs.Violations)
	}
	if len(figs.Unhealed) > 0 {
		t.Errorf("not healed: %v", figs.Unhealed)
	}
	if figs.Sandboxes == 0 {
		t.Error("no meshed pod ever ran: the test proved nothing")
	}
}
