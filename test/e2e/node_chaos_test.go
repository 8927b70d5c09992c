package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/pkg/xtables"
	"istio-cni.local/istio-cni/test/cluster"
)

var (
	chaosIterations = flag.Int("chaos.iterations", 5, "perturbations TestChaos runs, one of each kind in turn (make chaos: 50)")
	chaosReport     = flag.String("chaos.report", "", "file TestChaos writes its figures to, as JSON")
)

// A perturbation is one thing that goes wrong on a real node.
type perturbation struct {
	name string
	run  func(ctx context.Context, t *testing.T) error
}

var perturbations = []perturbation{
	{"agent-restart", func(ctx context.Context, t *testing.T) error {
		p, ok := installerPodOrEmpty(t)
		if !ok {
			return errors.New("no agent pod")
		}
		_, err := env.node.Kubectl(ctx, "-n", "istio-cni", "delete", "pod", p.Metadata.Name, "--wait=true")
		return err
	}},
	{"primary-rewrite", func(ctx context.Context, t *testing.T) error {
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
	{"foreign-config", func(ctx context.Context, t *testing.T) error {
		// Another CNI's config appears sorting first, then goes.
		foreign := filepath.Join(env.node.CNINetDir, "00-foreign.conflist")
		if err := os.WriteFile(foreign, env.primary, 0o644); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		return os.Remove(foreign)
	}},
	{"api-outage", func(ctx context.Context, t *testing.T) error {
		if err := env.node.Pause(); err != nil {
			return err
		}
		time.Sleep(5 * time.Second)
		return env.node.Resume(ctx)
	}},
	{"node-reboot", func(ctx context.Context, t *testing.T) error {
		return env.node.Reboot(ctx, cluster.RebootOptions{Down: 2 * time.Second})
	}},
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
	// RepairedInPlace is those later seen with their rules, same sandbox.
	Unredirected    int `json:"unredirected_running"`
	RepairedInPlace int `json:"repaired_in_place"`
	// AgentRepairs is the IstioRedirectRepaired Events on the stream's
	// pods; SandboxFailures its FailedCreatePodSandBox Events (the price of
	// failing closed).
	AgentRepairs    int `json:"agent_repairs"`
	SandboxFailures int `json:"sandbox_failures"`
	// HealMS is, per perturbation, the time from its end until the agent
	// is ready, the runtime's first config chains istio-cni and every
	// running meshed sandbox is redirected.
	HealMS     map[string][]float64 `json:"heal_ms"`
	Duration   string               `json:"duration"`
	Unhealed   []string             `json:"unhealed,omitempty"`
	Violations []string             `json:"violations,omitempty"`
}

// TestChaos: while a stream of meshed pods is created and deleted, the node
// goes through each perturbation in turn, *chaosIterations times. An
// observer reads every running meshed sandbox's rules straight from the
// runtime and the kernel (it holds while the API is down). No meshed pod may
// be seen running without its rules; every perturbation must heal.
func TestChaos(t *testing.T) {
	requireInstalled(t)
	start := time.Now()
	ctx := t.Context()
	obs := &observer{seen: map[string]*sandboxState{}}
	streamCtx, stopStream := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var created int
	live := &livePods{}
	wg.Go(func() { created = stream(streamCtx, t, live) })
	wg.Go(func() { obs.run(streamCtx) })
	figs := chaosFigures{Iterations: *chaosIterations, HealMS: map[string][]float64{}}
	for i := range *chaosIterations {
		p := perturbations[i%len(perturbations)]
		if err := p.run(ctx, t); err != nil {
			stopStream()
			wg.Wait()
			t.Fatalf("iteration %d, %s: %v", i, p.name, err)
		}
		end := time.Now()
		if err := waitHealed(ctx, obs, live, end, 3*time.Minute); err != nil {
			figs.Unhealed = append(figs.Unhealed, fmt.Sprintf("%d %s: %v", i, p.name, err))
			continue
		}
		d := time.Since(end)
		figs.HealMS[p.name] = append(figs.HealMS[p.name], float64(d.Milliseconds()))
		t.Logf("iteration %d: %s healed in %v", i, p.name, d.Round(time.Millisecond))
	}
	// Let the last pods run a while under observation.
	time.Sleep(3 * time.Second)
	stopStream()
	wg.Wait()
	figs.PodsCreated = created
	figs.Sandboxes, figs.Unredirected, figs.RepairedInPlace, figs.Violations = obs.figures()
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

// livePods are the stream's pods not deleted yet, with their creation
// times.
type livePods struct {
	mu   sync.Mutex
	pods []livePod
}

type livePod struct {
	name string
	at   time.Time
}

func (l *livePods) createdBefore(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.pods {
		if p.at.Before(t) {
			out = append(out, p.name)
		}
	}
	return out
}

func (l *livePods) set(pods []livePod) {
	l.mu.Lock()
	l.pods = slices.Clone(pods)
	l.mu.Unlock()
}

// stream creates a meshed pod every 1.5 s and deletes each after about 10
// s, until ctx ends; then it deletes what is left and returns how many it
// created. API errors (an outage) are skipped.
func stream(ctx context.Context, t *testing.T, l *livePods) int {
	var pods []livePod
	del := func(name string) bool {
		status, _, err := env.node.Do(context.Background(), http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, nil)
		return err == nil && (status < 300 || status == http.StatusNotFound)
	}
	n := 0
	tick := time.NewTicker(1500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.set(nil)
			for _, p := range pods {
				for i := 0; i < 50 && !del(p.name); i++ {
					time.Sleep(200 * time.Millisecond)
				}
			}
			return n
		case <-tick.C:
		}
		for len(pods) > 0 && time.Since(pods[0].at) > 10*time.Second && del(pods[0].name) {
			pods = pods[1:]
		}
		l.set(pods)
		if len(pods) >= 6 {
			continue
		}
		name := fmt.Sprintf("chaos-%d", n)
		if err := env.node.CreatePod(ctx, meshedPod(t, name).JSON()); err != nil {
			continue
		}
		n++
		pods = append(pods, livePod{name, time.Now()})
		l.set(pods)
	}
}

// observer reads the rules of every running meshed sandbox of the stream.
type observer struct {
	mu     sync.Mutex
	seen   map[string]*sandboxState // by sandbox ID
	byName map[string]*sandboxState // each pod's latest sandbox
}

type sandboxState struct {
	name       string
	bad        bool      // now without its rules
	everBad    bool      // seen without them at least once
	firstBad   time.Time // when
	diffs      []string
	goodAfter  bool // seen with them after having been without
	lastUpdate time.Time
	running    int // containers running at the last sighting
}

// runningRedirected reports whether the pod's latest sandbox was seen
// since `since` with both containers running and its rules in place.
func (o *observer) runningRedirected(name string, since time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.byName[name]
	return st != nil && st.lastUpdate.After(since) && st.running >= 2 && !st.bad
}

var chaosModel = iptables.Build(iptables.DefaultSpec(), true, false)

func (o *observer) run(ctx context.Context) {
	check := &podnet.Netns{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: xtables.Auto}}
	for ctx.Err() == nil {
		sbs, err := env.node.ReadySandboxes(ctx, "default")
		if err == nil {
			for _, sb := range sbs {
				if !strings.HasPrefix(sb.Name, "chaos-") || len(sb.Running) == 0 {
					continue
				}
				diffs, err := check.Check(ctx, sb.Netns, chaosModel)
				if err != nil {
					continue // torn down meanwhile
				}
				o.record(sb, diffs)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (o *observer) record(sb cluster.Sandbox, diffs []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.seen[sb.ID]
	if st == nil {
		st = &sandboxState{name: sb.Name}
		o.seen[sb.ID] = st
	}
	st.lastUpdate = time.Now()
	st.running = len(sb.Running)
	if o.byName == nil {
		o.byName = map[string]*sandboxState{}
	}
	o.byName[sb.Name] = st
	if len(diffs) > 0 {
		if !st.everBad {
			st.firstBad, st.diffs = time.Now(), diffs
		}
		st.bad, st.everBad = true, true
		return
	}
	if st.bad {
		st.goodAfter = true
	}
	st.bad = false
}

// badNow lists the sandboxes currently seen without their rules.
func (o *observer) badNow() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for id, st := range o.seen {
		// A sandbox not seen for a while is gone.
		if st.bad && time.Since(st.lastUpdate) < 2*time.Second {
			out = append(out, st.name+"/"+id[:12])
		}
	}
	return out
}

func (o *observer) figures() (seen, unredirected, repaired int, violations []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, st := range o.seen {
		seen++
		if st.everBad {
			unredirected++
			violations = append(violations, fmt.Sprintf("%s (sandbox %s) at %s: %s",
				st.name, id[:12], st.firstBad.Format("15:04:05.000"), strings.Join(st.diffs, "; ")))
		}
		if st.goodAfter {
			repaired++
		}
	}
	slices.Sort(violations)
	return seen, unredirected, repaired, violations
}

// waitHealed waits until the node is whole again: the agent answers
// /readyz, the runtime's first config chains istio-cni, no running meshed
// sandbox lacks its rules, and every stream pod created before the
// perturbation ended runs, redirected.
func waitHealed(ctx context.Context, o *observer, l *livePods, end time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var why string
	for time.Now().Before(deadline) {
		var waiting []string
		for _, name := range l.createdBefore(end) {
			if !o.runningRedirected(name, end) {
				waiting = append(waiting, name)
			}
		}
		switch {
		case !agentReady(ctx):
			why = "the agent's /readyz does not answer 200"
		case len(waiting) > 0:
			why = fmt.Sprint("not running redirected yet: ", waiting)
		case !firstConfigChains():
			why = "the runtime's first config does not chain istio-cni"
		case len(o.badNow()) > 0:
			why = fmt.Sprint("unredirected: ", o.badNow())
		default:
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New(why)
}

// agentReady asks the agent itself (the API's view lags a restart).
func agentReady(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", env.health), nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func firstConfigChains() bool {
	names, err := chain.ConfigFiles(env.node.CNINetDir)
	if err != nil || len(names) == 0 {
		return false
	}
	data, err := os.ReadFile(filepath.Join(env.node.CNINetDir, names[0]))
	return err == nil && chain.HasEntry(data)
}

// chaosEvents counts the stream's pods' repair and sandbox-failure Events.
func chaosEvents(t *testing.T) (repairs, failures int) {
	t.Helper()
	status, body, err := env.node.Do(t.Context(), http.MethodGet, "/api/v1/namespaces/default/events?limit=5000", nil)
	if err != nil || status != http.StatusOK {
		t.Errorf("listing events: %d %v", status, err)
		return 0, 0
	}
	var list struct {
		Items []struct {
			Reason         string
			Count          int
			InvolvedObject struct{ Name string }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Error(err)
		return 0, 0
	}
	for _, e := range list.Items {
		if !strings.HasPrefix(e.InvolvedObject.Name, "chaos-") {
			continue
		}
		switch e.Reason {
		case "IstioRedirectRepaired":
			repairs += max(e.Count, 1)
		case "FailedCreatePodSandBox":
			failures += max(e.Count, 1)
		}
	}
	return repairs, failures
}
