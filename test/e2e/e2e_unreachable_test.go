package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/nodeagent/taint"
	"istio-cni.local/istio-cni/test/poll"
)

// 6b. The agent's own way to the API server is cut (kubelet's is not):
// within the audit interval istio_cni_api_reachable reads 0 and its log
// says so once (Warn); /readyz and the node's taint do not move, as the
// files are in place; once the way is back the metric reads 1, the log
// says how long it was blind (Info) and the Node has a Warning Event
// IstioCNIAPIUnreachable. Right after test 6, which cuts the plugin's
// way; it needs no other test's state.
func TestAgentSaysWhenBlind(t *testing.T) {
	requireInstalled(t)
	agent := installerPod(t)
	p, _ := installerPodOrEmpty(t)
	poll.Until(t, time.Minute, "istio_cni_api_reachable 1", func() (bool, string) {
		v, found := metricFound(t, "istio_cni_api_reachable")
		return found && v == 1, fmt.Sprint(v, found)
	})
	tainted, err := nodeTainted(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Sampled throughout, from outside the agent's way to the API.
	var mu sync.Mutex
	var moved []string
	samples := 0
	stopSampling := poll.Every(100*time.Millisecond, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready := agentReady(ctx)
		now, err := nodeTainted(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			return // not a sample: at least 10 must read the node
		}
		samples++
		if !ready {
			moved = append(moved, time.Now().Format(time.TimeOnly)+" /readyz not ready")
		}
		if now != tainted {
			moved = append(moved, fmt.Sprintf("%s tainted %v", time.Now().Format(time.TimeOnly), now))
		}
	})
	defer stopSampling()
	logFrom := len(env.node.ContainerLog(p, "install-cni"))
	agentLog := func() string {
		log := env.node.ContainerLog(p, "install-cni")
		return log[min(logFrom, len(log)):]
	}

	cut := time.Now()
	env.proxy.down()
	restored := false
	defer func() {
		if !restored {
			_ = env.proxy.up()
		}
	}()
	poll.Until(t, 10*time.Second, "istio_cni_api_reachable 0", func() (bool, string) {
		v, found := metricFound(t, "istio_cni_api_reachable")
		return found && v == 0, fmt.Sprint(v, found)
	})
	t.Logf("istio_cni_api_reachable read 0 %v after the cut", time.Since(cut).Round(time.Millisecond))
	poll.Until(t, 10*time.Second, "the Warn line", func() (bool, string) {
		return strings.Count(agentLog(), `"level":"WARN","msg":"API server unreachable`) == 1, agentLog()
	})
	// Long enough for an Event (blindEventMin, 5 s): the pod view's last
	// sync, as the alert reads it, falls 6 s behind.
	poll.Until(t, 20*time.Second, "the last sync 6 s old", func() (bool, string) {
		v, _ := metricFound(t, "istio_cni_last_sync_timestamp_seconds")
		return v > 0 && float64(time.Now().UnixNano())/1e9-v > 6, fmt.Sprint(v)
	})

	if err := env.proxy.up(); err != nil {
		t.Fatal(err)
	}
	restored = true
	back := time.Now()
	poll.Until(t, time.Minute, "istio_cni_api_reachable 1 again", func() (bool, string) {
		v, found := metricFound(t, "istio_cni_api_reachable")
		return found && v == 1, fmt.Sprint(v, found)
	})
	t.Logf("istio_cni_api_reachable read 1 %v after the way was back", time.Since(back).Round(time.Millisecond))
	poll.Until(t, 10*time.Second, "the Info line", func() (bool, string) {
		return strings.Contains(agentLog(), `"level":"INFO","msg":"API server reachable again"`), agentLog()
	})
	poll.Until(t, 30*time.Second, "the Node's IstioCNIAPIUnreachable Event", func() (bool, string) {
		return nodeEventSince(t.Context(), "IstioCNIAPIUnreachable", cut)
	})
	t.Logf("the Node's Event %v after the way was back", time.Since(back).Round(time.Millisecond))
	stopSampling()
	mu.Lock()
	defer mu.Unlock()
	if len(moved) != 0 || samples < 10 {
		t.Errorf("readiness or the taint moved while the agent was blind (%d samples, %s was tainted %v): %q",
			samples, agent, tainted, moved)
	}
}

// nodeTainted reports whether the node carries the startup taint, read
// through the API directly (not the agent's proxy).
func nodeTainted(ctx context.Context) (bool, error) {
	status, body, err := env.node.Do(ctx, http.MethodGet, "/api/v1/nodes/"+env.node.Name, nil)
	if err != nil || status != http.StatusOK {
		return false, fmt.Errorf("GET node: %d %v", status, err)
	}
	var n struct {
		Spec struct{ Taints []struct{ Key string } }
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return false, err
	}
	for _, x := range n.Spec.Taints {
		if x.Key == taint.DefaultKey {
			return true, nil
		}
	}
	return false, nil
}

// nodeEventSince reports whether the Node has an Event with reason, last
// seen at or after since (to the second), and its message.
func nodeEventSince(ctx context.Context, reason string, since time.Time) (bool, string) {
	sel := url.QueryEscape("involvedObject.kind=Node,involvedObject.name=" + env.node.Name + ",reason=" + reason)
	status, body, err := env.node.Do(ctx, http.MethodGet, "/api/v1/events?fieldSelector="+sel, nil)
	if err != nil || status != http.StatusOK {
		return false, fmt.Sprintf("%d %v", status, err)
	}
	var list struct {
		Items []struct {
			Type, Message string
			LastTimestamp time.Time
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return false, err.Error()
	}
	for _, e := range list.Items {
		if e.Type == "Warning" && !e.LastTimestamp.Before(since.Truncate(time.Second)) {
			return true, e.Message
		}
	}
	return false, string(body)
}
