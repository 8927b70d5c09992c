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
// one more after it, and checks each: it ran at its first attempt (no
// FailedCreatePodSandBox) and its namespace holds exactly a default
// sidecar's rule model; then it is deleted. The first failure stops the
// stream and fails the test once.
func meshedDuring(t *testing.T, prefix string, op func()) {
	t.Helper()
	meshedDuringAllowing(t, prefix, nil, op)
}

// meshedDuringAllowing is meshedDuring that lets through a pod whose
// failed sandboxes excused says are not istio-cni's doing (one of the
// primary's own, say), as long as it then ran with its rules.
func meshedDuringAllowing(t *testing.T, prefix string, excused func(events string) bool, op func()) {
	t.Helper()
	target := serverAddr(t)
	streamDuring(t, prefix, func(name string, n *cluster.Node) cluster.PodSpec {
		return cluster.PodSpec{Namespace: "default", Name: name, Target: target, Sidecar: true, NodeName: n.Name}
	}, func(ctx context.Context, n *cluster.Node, name string) error {
		return startedRedirected(ctx, n, name, excused)
	}, op)
}

// streamDuring is meshedDuring's stream with the pods spec makes, each
// checked by check (and then deleted).
func streamDuring(t *testing.T, prefix string, spec func(name string, n *cluster.Node) cluster.PodSpec,
	check func(ctx context.Context, n *cluster.Node, name string) error, op func()) {
	t.Helper()
	s := &podStream{t: t, prefix: prefix, spec: spec, check: check, perNode: map[string]int{},
		slots: make(chan struct{}, duringAlive), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	// op may end the test (t.Fatal): the stream must not outlive it. A
	// cleanup runs once t.Context() is done, which ends the checks.
	t.Cleanup(s.finish)
	op()
	s.mu.Lock()
	s.opDone = true
	s.mu.Unlock()
	// The state op left is covered too: the pod held back for it.
	poll.Until(t, 2*time.Minute, "a pod created after the operation", func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.afterOp > 0 || s.failure != nil, fmt.Sprintf("%d created", s.created)
	})
	s.finish()
	t.Logf("%d pods created during the operation (at most %d at once); checked per node: %v", s.created, duringAlive, s.perNode)
	if s.failure != nil {
		t.Fatal(s.failure)
	}
	for _, n := range env.fleet.Nodes {
		if s.perNode[n.Name] == 0 {
			t.Errorf("no pod was checked on node %s during the operation", n.Name)
		}
	}
}

// podStream is meshedDuring's stream: at most duringAlive pods alive and
// duringMax in all, the last held back until the operation is over.
type podStream struct {
	t          *testing.T
	prefix     string
	spec       func(name string, n *cluster.Node) cluster.PodSpec
	check      func(ctx context.Context, n *cluster.Node, name string) error
	wg         sync.WaitGroup
	slots      chan struct{}
	stop, done chan struct{}
	halt       sync.Once

	mu      sync.Mutex
	created int
	afterOp int  // created once op had returned
	opDone  bool // op has returned
	failure error
	perNode map[string]int
}

func (s *podStream) run() {
	defer close(s.done)
	tick := time.NewTicker(duringEvery)
	defer tick.Stop()
	for {
		s.mu.Lock()
		created, after, failed := s.created, s.opDone, s.failure != nil
		s.mu.Unlock()
		if created >= duringMax || failed {
			return
		}
		if created < duringMax-1 || after {
			select {
			case <-s.stop:
				return
			case s.slots <- struct{}{}:
			}
			s.start(created, after)
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// start creates pod number i, on node i mod the fleet's size, and checks
// it in the background.
func (s *podStream) start(i int, afterOp bool) {
	n := env.fleet.Nodes[i%len(env.fleet.Nodes)]
	name := fmt.Sprintf("%s-%d", s.prefix, i)
	spec := s.spec(name, n)
	if err := n.CreatePod(s.t.Context(), spec.JSON()); err != nil {
		<-s.slots
		return
	}
	s.mu.Lock()
	s.created++
	if afterOp {
		s.afterOp++
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-s.slots }()
		defer func() { _ = n.DeletePod(context.Background(), spec.Namespace, name) }()
		err := s.check(s.t.Context(), n, name)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil && s.failure == nil {
			s.failure = err
		} else if err == nil {
			s.perNode[n.Name]++
		}
	}()
}

// finish stops the stream and waits for its checks; safe to call twice.
func (s *podStream) finish() {
	s.halt.Do(func() { close(s.stop) })
	<-s.done
	s.wg.Wait()
}

// startedRedirected waits for the pod on node n, checks its sandbox never
// failed (or failed as excused, if set, allows) and its namespace holds
// the rule model.
func startedRedirected(ctx context.Context, n *cluster.Node, name string, excused func(events string) bool) error {
	wctx, cancel := context.WithTimeout(ctx, podTimeout)
	_, err := n.WaitRunning(wctx, "default", name)
	cancel()
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if ev := n.PodEvents(ctx, "default", name); strings.Contains(ev, "FailedCreatePodSandBox") {
		if excused == nil || !excused(ev) {
			return fmt.Errorf("node %s: %s: a sandbox failed before it ran: %s", n.Name, name, ev)
		}
		// In the test's output: go test -v shows it with the test's lines.
		fmt.Printf("node %s: %s: a failed sandbox excused: %s\n", n.Name, name, ev)
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
	if err := matchModel(rules, iptables.Build(iptables.DefaultSpec(), true, false)); err != nil {
		return fmt.Errorf("node %s: %s: %w", n.Name, name, err)
	}
	return nil
}

// matchModel: an iptables-save of a pod's namespace holds exactly m's
// IPv4 rules.
func matchModel(save string, m iptables.Model) error {
	observed, err := iptables.ParseSave([]byte(save))
	if err != nil {
		return err
	}
	if m.V4 == nil {
		return errors.New("the model has no IPv4 rules")
	}
	if d := iptables.Diff(m.V4, observed); len(d) > 0 {
		return fmt.Errorf("rules differ from the model: %v", d)
	}
	return nil
}
