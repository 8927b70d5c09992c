package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// A rollout's stream: a meshed pod every skewEvery while the DaemonSet
// rolls and its new agent makes its first audit passes, at most skewMax-1
// of them, then one once that is over. Each is
// deleted once checked, so at most skewMax are alive at once.
const (
	skewEvery = 700 * time.Millisecond
	skewMax   = 6
)

// streamPod is one pod started during a rollout: when, and how its ADD
// went.
type streamPod struct {
	name, phase, ranIn string
	after              bool // created once the rollout was over
	err                error
}

// startSkewStream starts meshed pods, of each variant in turn, until
// rolled is closed (and one more after); the returned func waits for
// every one to be checked (checkSkewPod) and returns them.
func startSkewStream(t *testing.T, prefix string, rolled <-chan struct{}) func() []streamPod {
	t.Helper()
	target := server(t)
	variants := skewVariants()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		pods []streamPod
	)
	start := func(i int, phase string, after bool) {
		v := variants[i%len(variants)]
		s := streamPod{name: fmt.Sprintf("%s-%d-%s", prefix, i, v.name), phase: phase, after: after}
		if err := env.node.CreatePod(t.Context(), v.podJSON(target, s.name)); err != nil {
			s.err = err
		} else {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ranIn, s.err = checkSkewPod(t.Context(), v, target, s.name)
				mu.Lock()
				pods = append(pods, s)
				mu.Unlock()
			}()
			return
		}
		mu.Lock()
		pods = append(pods, s)
		mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(skewEvery)
		defer tick.Stop()
		i := 0
	during:
		for ; i < skewMax-1; i++ {
			start(i, agentPhase(t.Context()), false)
			select {
			case <-rolled:
				i++
				break during
			case <-t.Context().Done():
				return
			case <-tick.C:
			}
		}
		select {
		case <-rolled:
		case <-t.Context().Done(): // the test failed before the rollout ended
			return
		}
		start(i, "after the rollout: "+agentPhase(t.Context()), true)
	}()
	return func() []streamPod {
		<-done
		wg.Wait()
		return pods
	}
}

// checkSkewPod waits for the pod, checks that it started at its first
// attempt (one sandbox, attempt 0, no FailedCreatePodSandBox) holding its
// variant's model, and deletes it. It returns where its ADD ran, as the
// plugin's log says.
func checkSkewPod(ctx context.Context, v skewVariant, target, name string) (string, error) {
	defer func() { _ = env.node.DeletePod(context.Background(), "default", name) }()
	wctx, cancel := context.WithTimeout(ctx, podTimeout)
	p, err := env.node.WaitRunning(wctx, "default", name)
	cancel()
	if err != nil {
		return "", err
	}
	if ev := env.node.PodEvents(ctx, "default", name); strings.Contains(ev, "FailedCreatePodSandBox") {
		return "", fmt.Errorf("%s: a sandbox failed before it ran: %s", name, ev)
	}
	if err := firstSandbox(ctx, p); err != nil {
		return "", err
	}
	model, err := v.model(target, name)
	if err != nil {
		return "", err
	}
	netns, err := env.node.PodNetNS(ctx, "default", name)
	if err != nil {
		return "", err
	}
	st, err := readNetState(ctx, netns)
	if err != nil {
		return "", err
	}
	if err := st.matchesModel(model); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	ranIn := "? (no ADD of it in the plugin's log)"
	var last cluster.ADDLine
	ok := false
	// The ADD's log line is written as it returns: wait for it a moment.
	_ = poll.Wait(5*time.Second, "the ADD's log line", func() (bool, string) {
		last, ok = lastADD(p)
		return ok, ""
	})
	switch {
	case !ok:
	case last.RanIn != "":
		ranIn = last.RanIn
	case last.HandedBack != "":
		ranIn = "istio-cni-full (handed back: " + last.HandedBack + ")"
	default:
		ranIn = "istio-cni-full"
	}
	return ranIn, nil
}

// agentPhase says which agent pods there are now, each with its image's
// tag and state: when a stream pod was created.
func agentPhase(ctx context.Context) string {
	status, body, err := env.node.Do(ctx, http.MethodGet,
		"/api/v1/namespaces/istio-cni/pods?labelSelector=app.kubernetes.io%2Fcomponent%3Dnode-agent", nil)
	if err != nil || status != http.StatusOK {
		return fmt.Sprintf("(agents unknown: %d %v)", status, err)
	}
	var list struct {
		Items []struct {
			Metadata struct{ DeletionTimestamp *time.Time }
			Spec     struct{ Containers []struct{ Image string } }
			Status   struct {
				ContainerStatuses []struct{ Ready bool }
			}
		}
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) == 0 {
		return "no agent pod"
	}
	var out []string
	for _, p := range list.Items {
		image := p.Spec.Containers[0].Image
		state := "not ready"
		if cs := p.Status.ContainerStatuses; len(cs) > 0 && cs[0].Ready {
			state = "ready"
		}
		if p.Metadata.DeletionTimestamp != nil {
			state = "terminating"
		}
		out = append(out, fmt.Sprintf("agent %s %s", image[strings.LastIndex(image, ":")+1:], state))
	}
	return strings.Join(out, "; ")
}
