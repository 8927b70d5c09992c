package multinode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// The pods meshedDuring keeps: at most duringAlive at once and duringMax in
// all, whatever the operation takes (a stream that grows with the
// operation's length feeds its own slowdown).
const (
	duringAlive = 4
	duringMax   = 45
	duringEvery = 400 * time.Millisecond
)

// meshedDuring starts meshed pods on every node in turn while op runs, and
// until one more has been created after it, and checks each: it ran at its first attempt (no
// FailedCreatePodSandBox) and its namespace holds exactly a default
// sidecar's rule model; then it is deleted. The first failure stops the
// stream and fails the test once.
func meshedDuring(t *testing.T, prefix string, op func()) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failure error
		perNode = map[string]int{}
	)
	slots := make(chan struct{}, duringAlive)
	stop := make(chan struct{})
	created := 0
	count := func() int { mu.Lock(); defer mu.Unlock(); return created }
	streamDone := make(chan struct{})
	var halt sync.Once
	finish := func() {
		halt.Do(func() { close(stop) })
		<-streamDone
		wg.Wait()
	}
	target := serverAddr(t)
	go func() {
		defer close(streamDone)
		tick := time.NewTicker(duringEvery)
		defer tick.Stop()
		for count() < duringMax {
			select {
			case <-stop:
				return
			case slots <- struct{}{}:
			}
			mu.Lock()
			failed := failure != nil
			mu.Unlock()
			if failed {
				return
			}
			n := env.fleet.Nodes[created%len(env.fleet.Nodes)]
			name := fmt.Sprintf("%s-%d", prefix, created)
			spec := cluster.PodSpec{Namespace: "default", Name: name, Target: target, Sidecar: true, NodeName: n.Name}
			if err := n.CreatePod(t.Context(), spec.JSON()); err != nil {
				<-slots
			} else {
				mu.Lock()
				created++
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					err := startedRedirected(t.Context(), n, name)
					mu.Lock()
					if err != nil && failure == nil {
						failure = err
					} else if err == nil {
						perNode[n.Name]++
					}
					mu.Unlock()
				}()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// op may end the test (t.Fatal): the stream must not outlive it. A
	// cleanup runs once t.Context() is done, which ends the checks.
	t.Cleanup(finish)
	op()
	// The state op left is covered too: one more pod, unless the stream
	// has ended (its budget spent, or a failure).
	atOp := count()
	poll.Until(t, 2*time.Minute, "a meshed pod created after the operation", func() (bool, string) {
		select {
		case <-streamDone:
			return true, ""
		default:
		}
		return count() > atOp, fmt.Sprintf("%d created", count())
	})
	finish()
	t.Logf("%d meshed pods created during the operation (at most %d at once); checked per node: %v", created, duringAlive, perNode)
	if failure != nil {
		t.Fatal(failure)
	}
	for _, n := range env.fleet.Nodes {
		if perNode[n.Name] == 0 {
			t.Errorf("no meshed pod was checked on node %s during the operation", n.Name)
		}
	}
}

// startedRedirected waits for the pod on node n, checks its sandbox never
// failed and its namespace holds the rule model, and deletes it.
func startedRedirected(ctx context.Context, n *cluster.Node, name string) error {
	defer func() { _ = n.DeletePod(context.Background(), "default", name) }()
	wctx, cancel := context.WithTimeout(ctx, podTimeout)
	_, err := n.WaitRunning(wctx, "default", name)
	cancel()
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if ev := n.PodEvents(ctx, "default", name); strings.Contains(ev, "FailedCreatePodSandBox") {
		return fmt.Errorf("node %s: %s: a sandbox failed before it ran: %s", n.Name, name, ev)
	}
	return rulesMatchModel(ctx, n, name)
}

// rulesMatchModel: the pod's namespace holds exactly a default sidecar's
// model, read as an operator on its node would (nsenter, iptables-save).
func rulesMatchModel(ctx context.Context, n *cluster.Node, name string) error {
	rules, err := n.IptablesSave(ctx, "default", name)
	if err != nil {
		return err
	}
	observed, err := iptables.ParseSave([]byte(rules))
	if err != nil {
		return err
	}
	var errs []error
	for _, rs := range iptables.Build(iptables.DefaultSpec(), true, false).Rulesets() {
		if d := iptables.Diff(rs, observed); len(d) > 0 {
			errs = append(errs, fmt.Errorf("node %s: %s: rules differ from the model: %v", n.Name, name, d))
		}
	}
	return errors.Join(errs...)
}
