package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"istio-cni.local/istio-cni/pkg/iptables"
)

// The pods meshedDuring keeps: at most duringAlive at once and duringMax
// in all, whatever the operation takes. A stream that grows with the
// operation's length feeds its own slowdown and, past kubelet's 110 pods,
// makes pods that can never start (a slow replace once made 248).
const (
	duringAlive = 4
	duringMax   = 40
	duringEvery = 400 * time.Millisecond
)

// meshedDuring starts meshed pods while op runs, and for a second after
// it, and checks each as it comes up: it ran at its first attempt (no
// FailedCreatePodSandBox), its namespace holds exactly a default sidecar's
// rule model; then it is deleted. The first pod that fails stops the
// stream, and its error, with the pod's Events, fails the test once.
func meshedDuring(t *testing.T, prefix string, op func()) {
	t.Helper()
	streamDuring(t, prefix, func(ctx context.Context, name string) error {
		return env.node.CreatePod(ctx, meshedPod(t, name).JSON())
	}, checkStartedRedirected, op)
}

// streamDuring creates pods named prefix-N with create while op runs, and
// for a second after it, at most duringAlive at once and duringMax in
// all, and checks each with check (which deletes it). The first pod that
// fails stops the stream and fails the test once.
func streamDuring(t *testing.T, prefix string, create, check func(ctx context.Context, name string) error, op func()) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failure error
		checked int
	)
	slots := make(chan struct{}, duringAlive)
	stop := make(chan struct{})
	created := 0
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		tick := time.NewTicker(duringEvery)
		defer tick.Stop()
		for created < duringMax {
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
			name := fmt.Sprintf("%s-%d", prefix, created)
			if err := create(t.Context(), name); err != nil {
				<-slots
			} else {
				created++
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					err := check(t.Context(), name)
					mu.Lock()
					if err != nil && failure == nil {
						failure = err
					} else if err == nil {
						checked++
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
	op()
	time.Sleep(time.Second)
	close(stop)
	<-streamDone
	wg.Wait()
	t.Logf("%d pods created during the operation (at most %d at once), %d checked", created, duringAlive, checked)
	if failure != nil {
		t.Fatal(failure)
	}
	if created == 0 {
		t.Fatal("no pod was created during the operation")
	}
}

// checkStartedRedirected waits for the pod, checks that its sandbox never
// failed and that its namespace holds the rule model, and deletes it.
func checkStartedRedirected(ctx context.Context, name string) error {
	defer func() { _ = env.node.DeletePod(context.Background(), "default", name) }()
	wctx, cancel := context.WithTimeout(ctx, podTimeout)
	_, err := env.node.WaitRunning(wctx, "default", name)
	cancel()
	if err != nil {
		return err
	}
	if ev := env.node.PodEvents(ctx, "default", name); strings.Contains(ev, "FailedCreatePodSandBox") {
		return fmt.Errorf("%s: a sandbox failed before it ran: %s", name, ev)
	}
	return rulesMatchModel(ctx, name)
}

// rulesMatchModel: the pod's namespace holds exactly a default sidecar's
// model.
func rulesMatchModel(ctx context.Context, name string) error {
	rules, err := env.node.IptablesSave(ctx, "default", name)
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
			errs = append(errs, fmt.Errorf("%s: rules differ from the model: %v", name, d))
		}
	}
	return errors.Join(errs...)
}

// assertRules: the pod's namespace holds exactly a default sidecar's model.
func assertRules(t *testing.T, name string) {
	t.Helper()
	if err := rulesMatchModel(t.Context(), name); err != nil {
		t.Error(err)
	}
}
