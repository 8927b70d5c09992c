package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/applied"
	"istio-cni.local/istio-cni/pkg/chain"
	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/release"
	"istio-cni.local/istio-cni/pkg/iptables/xtables"
	"istio-cni.local/istio-cni/pkg/nodeagent/install"
	"istio-cni.local/istio-cni/pkg/podnet"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

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
// s, until ctx ends; then it deletes what is left and returns how many
// meshed pods it created. At most 6 are in flight: alive, or deleted but
// still terminating (the API keeps a pod until the kubelet has stopped its
// sandbox). Counting only the alive ones let a loaded node's teardowns
// pile up behind a constant creation rate, and the pile slowed every
// sandbox on the node, the agent's own included: a slow node must slow
// the stream, not the other way round. While hold is set it creates
// plain pods instead (they must start, and are not observed), under the
// same bounds: an uninstall can hold it for minutes. API errors (an
// outage) are skipped.
func stream(ctx context.Context, t *testing.T, l *livePods, hold *atomic.Bool) int {
	var pods []livePod
	del := func(name string) bool {
		status, _, err := env.node.Do(context.Background(), http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, nil)
		return err == nil && (status < 300 || status == http.StatusNotFound)
	}
	n, plainN := 0, 0
	var plains []livePod
	var terminating []string
	deleted := func(name string) bool {
		if !del(name) {
			return false
		}
		terminating = append(terminating, name)
		return true
	}
	gone := func(name string) bool {
		status, _, err := env.node.Do(ctx, http.MethodGet, "/api/v1/namespaces/default/pods/"+name, nil)
		return err == nil && status == http.StatusNotFound
	}
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
			for _, p := range plains {
				del(p.name)
			}
			return n
		case <-tick.C:
		}
		for len(pods) > 0 && time.Since(pods[0].at) > 10*time.Second && deleted(pods[0].name) {
			pods = pods[1:]
		}
		for len(plains) > 0 && time.Since(plains[0].at) > 10*time.Second && deleted(plains[0].name) {
			plains = plains[1:]
		}
		l.set(pods)
		terminating = slices.DeleteFunc(terminating, gone)
		if len(pods)+len(plains)+len(terminating) >= 6 {
			continue
		}
		if hold.Load() {
			plain := fmt.Sprintf("plain-while-uninstalled-%d", plainN)
			if env.node.CreatePod(ctx, cluster.PodSpec{Namespace: "default", Name: plain, Target: server(t)}.JSON()) == nil {
				plainN++
				plains = append(plains, livePod{plain, time.Now()})
			}
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
	// foreign are the spans a foreign config sorted first (foreign-config).
	foreign []span
}

type span struct{ from, to time.Time }

// foreignSpan records that a foreign config sorted first from..to.
func (o *observer) foreignSpan(from, to time.Time) {
	o.mu.Lock()
	o.foreign = append(o.foreign, span{from, to})
	o.mu.Unlock()
}

// throughForeign reports whether a sandbox the runtime never passed to
// istio-cni was made while a foreign config could have been the runtime's
// first: the window between a foreign config appearing and the installer
// renaming its own to sort before it, which no CNI plugin can close (the
// runtime reads the directory, not us). The agent's audit repairs such a
// pod once the API shows it started; the heal waits for that. Its CNI ADD
// runs up to seconds after the runtime began the sandbox, hence the slack.
func (o *observer) throughForeign(st *sandboxState) bool {
	if !st.noADD {
		return false
	}
	for _, w := range o.foreign {
		if st.created.After(w.from.Add(-10*time.Second)) && st.created.Before(w.to) {
			return true
		}
	}
	return false
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
	created    time.Time
	// noADD: when first seen without its rules, istio-cni had left no
	// record for it (every ADD leaves one, pass-through too).
	noADD bool
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

// records are the plugin's per-sandbox records on the node.
func records() applied.Store {
	return applied.Store{Dir: filepath.Join(env.node.IstioRunDir, install.RecordsDirName)}
}

func (o *observer) run(ctx context.Context) {
	check := &podnet.Network{Programmer: &xtables.Programmer{Runner: xtables.ExecRunner{}, Backend: release.Auto}}
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
				// A sandbox being torn down loses its rules (CNI DEL)
				// only after its containers stopped: rules found missing
				// count only if a container still runs after the check.
				if len(diffs) > 0 && !stillRunning(ctx, sb.ID) {
					continue
				}
				o.record(sb, diffs)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func stillRunning(ctx context.Context, id string) bool {
	sbs, err := env.node.ReadySandboxes(ctx, "default")
	if err != nil {
		return false
	}
	return slices.ContainsFunc(sbs, func(sb cluster.Sandbox) bool { return sb.ID == id && len(sb.Running) > 0 })
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
			st.firstBad, st.diffs, st.created = time.Now(), diffs, sb.Created
			st.noADD = !records().Has(sb.UID, sb.ID)
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

// observerFigures is what the observer saw over the whole run.
type observerFigures struct {
	seen, unredirected, throughForeign, repaired int
	violations, foreign                          []string
}

func (o *observer) figures() observerFigures {
	o.mu.Lock()
	defer o.mu.Unlock()
	var f observerFigures
	for id, st := range o.seen {
		f.seen++
		if !st.everBad {
			continue
		}
		line := fmt.Sprintf("%s (sandbox %s, made %s) at %s: %s", st.name, id[:12],
			st.created.Format("15:04:05.000"), st.firstBad.Format("15:04:05.000"), strings.Join(st.diffs, "; "))
		if o.throughForeign(st) {
			f.throughForeign++
			f.foreign = append(f.foreign, line)
		} else {
			f.unredirected++
			f.violations = append(f.violations, line)
		}
		if st.goodAfter {
			f.repaired++
		}
	}
	slices.Sort(f.violations)
	slices.Sort(f.foreign)
	return f
}

// waitHealed waits until the node is whole again: the agent answers
// /readyz, the runtime's first config chains istio-cni, no running meshed
// sandbox lacks its rules, and every stream pod created before the
// perturbation ended runs, redirected.
func waitHealed(ctx context.Context, o *observer, l *livePods, end time.Time, limit time.Duration, logf func(string, ...any)) error {
	lastLog := time.Now()
	return poll.Wait(limit, "healed", func() (bool, string) {
		why := unhealed(ctx, o, l, end)
		if why != "" && time.Since(lastLog) > 10*time.Second {
			logf("still healing after %v: %s", time.Since(end).Round(time.Second), why)
			lastLog = time.Now()
		}
		return why == "", why
	})
}

// unhealed says what is not whole yet, or "".
func unhealed(ctx context.Context, o *observer, l *livePods, end time.Time) string {
	var waiting []string
	for _, name := range l.createdBefore(end) {
		if !o.runningRedirected(name, end) {
			waiting = append(waiting, name)
		}
	}
	switch {
	case !agentReady(ctx):
		return "the agent's /readyz does not answer 200"
	case len(waiting) > 0:
		return fmt.Sprint("not running redirected yet: ", waiting)
	case !firstConfigChains():
		return "the runtime's first config does not chain istio-cni"
	case len(o.badNow()) > 0:
		return fmt.Sprint("unredirected: ", o.badNow())
	}
	return ""
}

// agentReady asks the agent itself (the API's view lags a restart).
func agentReady(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.agent.HealthURL("/readyz"), nil)
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
	cd, err := install.ReadConfDir(env.node.CNINetDir)
	return err == nil && len(cd.Files) > 0 && chain.HasEntry(cd.Files[0].Data)
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

// readyAt is when the agent's /readyz first answers 200 from now on.
func readyAt(ctx context.Context) time.Time {
	for !agentReady(ctx) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

// agentStarted is the start time of the running agent process (the
// newest install-cni), from /proc: its start in clock ticks after boot,
// against the uptime.
func agentStarted() (time.Time, error) {
	// Uptime (to the centisecond) beats btime (to the second).
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	var uptime float64
	if _, err := fmt.Sscan(string(up), &uptime); err != nil {
		return time.Time{}, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return time.Time{}, err
	}
	var newest uint64
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "install-cni" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		var ticks uint64
		if len(fields) > 19 {
			_, _ = fmt.Sscan(fields[19], &ticks)
		}
		newest = max(newest, ticks)
	}
	if newest == 0 {
		return time.Time{}, errors.New("no install-cni process")
	}
	const clockTicks = 100 // USER_HZ on Linux
	sinceStart := time.Duration(uptime*float64(time.Second)) - time.Duration(newest)*time.Second/clockTicks
	return now.Add(-sinceStart), nil
}
